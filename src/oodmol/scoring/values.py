"""What a predicted value or σ must be to be scored, for every way predictions arrive
(a file made elsewhere, arrays through the Python API): a finite number whose square is
finite too, and a σ that is not negative. One rule, so the two doors never disagree."""

from __future__ import annotations

import numpy as np

from oodmol.metrics.regression import MAX_ABS_VALUE

SIGMA_COLUMNS = ("y_std", "sigma")


def value_problems(values: np.ndarray, what: str) -> np.ndarray:
    """Per value, what is wrong with it ("" where nothing is): `what` is "y_pred" (or
    "prediction") or "y_std" (or "sigma")."""
    values = np.asarray(values, dtype=float)
    problems = np.full(values.shape, "", dtype=object)
    with np.errstate(invalid="ignore"):
        problems[np.abs(values) > MAX_ABS_VALUE] = (
            f"beyond ±{MAX_ABS_VALUE:g} (its square is not a finite number)"
        )
        if what in SIGMA_COLUMNS:
            problems[values < 0] = "negative"
    problems[~np.isfinite(values)] = "not finite"
    return problems
