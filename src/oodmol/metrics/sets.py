"""The regression sections of metrics.json: metrics of the ID and OOD sets, BOOM's binned
R² on the OOD set, and a stop on non-finite predictions before any of them; and the
extrapolation section of the same sets."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from oodmol.metrics.extrapolation import extrapolation_metrics
from oodmol.metrics.regression import binned_r2, check_finite_predictions, regression_metrics
from oodmol.predictions import SetPredictions


def compute_metrics(sets: Mapping[str, SetPredictions], train_median: float) -> dict:
    """Regression metrics of the ID and OOD sets; the OOD set adds BOOM's binned R² (split
    at the median of the training targets), and each set counts the molecules the model
    flagged (`SetPredictions.flags`, e.g. malformed decodes). A non-finite prediction in
    any set stops everything, naming the molecules: a NaN metric would hide which inputs
    broke the model."""
    metrics: dict = {}
    for name, s in sets.items():
        check_finite_predictions(
            s.y_pred, [f"mol {i} ({smi})" for i, smi in zip(s.mol_id, s.smiles, strict=True)]
        )
        if name in ("id", "ood"):
            metrics[name] = regression_metrics(s.y_true, s.y_pred)
            for flag, marked in (s.flags or {}).items():
                metrics[name][flag] = int(np.sum(marked))
    if "ood" in sets:
        tails = binned_r2(sets["ood"].y_true, sets["ood"].y_pred, train_median)
        metrics["ood"].update(tails)
    return metrics


def extrapolation_section(
    sets: Mapping[str, SetPredictions],
    train_median: float,
    train_range: tuple[float, float] | None,
) -> dict | None:
    """`oodmol.metrics.extrapolation`'s measures of the ID and OOD sets; None without both."""
    if "id" not in sets or "ood" not in sets:
        return None
    test_id, ood = sets["id"], sets["ood"]
    return extrapolation_metrics(
        test_id.y_true, test_id.y_pred, ood.y_true, ood.y_pred, train_median, train_range
    )
