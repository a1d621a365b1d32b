"""Regression metrics for ID and OOD test sets, with BOOM's binned R².

Two R²s are kept because they differ where it matters: ``r2`` is the coefficient of
determination (sklearn's r2_score), which counts a model's bias; ``pearson_r2`` is the
squared Pearson correlation, which does not — and is what BOOM's tables call R² (our
RF runs on the 10k density task reproduce BOOM's ID R² 0.912 and OOD binned R² 0.021
with it, and give 0.89 and −6.7 with the coefficient of determination).

Every function takes plain array-likes and returns plain Python numbers so that the
result can go straight into ``metrics.json``. A value that is mathematically undefined
for the given data (R² of a constant target, Spearman ρ of fewer than two points, ...)
is returned as NaN rather than raising, because one degenerate tail or tiny test set
must not abort a whole benchmark run.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike
from scipy.stats import spearmanr

from oodmol.errors import RunFailure

# How many offending molecules an error message lists before summarising.
_MAX_NAMES_SHOWN = 10


def _as_pair(y_true: ArrayLike, y_pred: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Flatten both inputs to float vectors and insist they line up."""
    t = np.asarray(y_true, dtype=float).ravel()
    p = np.asarray(y_pred, dtype=float).ravel()
    if t.shape != p.shape:
        raise ValueError(f"y_true has {t.size} values but y_pred has {p.size}")
    return t, p


def r2(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """R² = 1 − Σ(y − ŷ)² / Σ(y − ȳ)², ȳ the mean of ``y_true`` itself (sklearn's r2_score).

    NaN when fewer than two values or when ``y_true`` is constant (SS_tot = 0), where
    sklearn would instead return an arbitrary 0 or 1.
    """
    t, p = _as_pair(y_true, y_pred)
    if t.size < 2:
        return float("nan")
    ss_tot = float(np.sum((t - t.mean()) ** 2))
    if ss_tot == 0.0:
        return float("nan")
    return 1.0 - float(np.sum((t - p) ** 2)) / ss_tot


def pearson_r2(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """Squared Pearson correlation r(y, ŷ)²: BOOM's R² (blind to a constant offset or a
    wrong scale). NaN when fewer than two values or either side is constant."""
    t, p = _as_pair(y_true, y_pred)
    if t.size < 2 or np.ptp(t) == 0 or np.ptp(p) == 0:
        return float("nan")
    return float(np.corrcoef(t, p)[0, 1] ** 2)


def regression_metrics(y_true: ArrayLike, y_pred: ArrayLike) -> dict[str, float]:
    """Return ``n``, ``rmse``, ``mae``, ``r2``, ``pearson_r2`` and ``spearman`` for one set.

    rmse = sqrt(mean((y − ŷ)²)), mae = mean(|y − ŷ|), r2 as in :func:`r2`, spearman =
    Spearman rank correlation ρ(y, ŷ) (scipy.stats.spearmanr, average ranks for ties).
    Undefined values are NaN: rmse/mae when n = 0; r2 when n < 2 or y is constant;
    spearman and pearson_r2 (:func:`pearson_r2`) when n < 2 or either y or ŷ is
    constant. Non-finite inputs propagate.
    """
    t, p = _as_pair(y_true, y_pred)
    n = int(t.size)
    nan = float("nan")
    err = t - p
    rmse = float(np.sqrt(np.mean(err**2))) if n else nan
    mae = float(np.mean(np.abs(err))) if n else nan
    constant = n < 2 or np.ptp(t) == 0 or np.ptp(p) == 0
    rho = nan if constant else float(spearmanr(t, p).statistic)
    return {
        "n": n,
        "rmse": rmse,
        "mae": mae,
        "r2": r2(t, p),
        "pearson_r2": pearson_r2(t, p),
        "spearman": rho,
    }


def binned_r2(y_true: ArrayLike, y_pred: ArrayLike, split_value: float) -> dict[str, float]:
    """BOOM's OOD correlation metric: the mean of R² computed separately in each tail.

    The OOD set of a property-tail split holds molecules from both ends of the target
    distribution, so a plain R² over it mostly rewards telling the two tails apart. Here
    the OOD molecules are split at ``split_value`` — the median of the *training*
    targets — into a low tail (y < split_value) and a high tail (y >= split_value; a
    value exactly at the median goes high). Each tail's R² uses that tail's own mean
    (see :func:`r2`). ``binned_r2`` is the mean of the tail R² values that are defined,
    i.e. tails with at least two molecules and non-constant targets; NaN if neither is.
    ``binned_pearson_r2`` is the same mean of the tails' :func:`pearson_r2`: the number
    BOOM's Table 5 prints.
    """
    t, p = _as_pair(y_true, y_pred)
    high = t >= split_value
    r2_low = r2(t[~high], p[~high])
    r2_high = r2(t[high], p[high])
    pearson_low = pearson_r2(t[~high], p[~high])
    pearson_high = pearson_r2(t[high], p[high])
    return {
        "binned_r2": _mean_of_defined(r2_low, r2_high),
        "binned_pearson_r2": _mean_of_defined(pearson_low, pearson_high),
        "r2_low": r2_low,
        "r2_high": r2_high,
        "n_low": int((~high).sum()),
        "n_high": int(high.sum()),
    }


def _mean_of_defined(*values: float) -> float:
    defined = [v for v in values if not np.isnan(v)]
    return float(np.mean(defined)) if defined else float("nan")


# the largest |value| a prediction or σ may have: its square, and a mean of squares over
# a set, must stay finite in float64 (1e308 would make every error metric infinite)
MAX_ABS_VALUE = 1e150


class NonFinitePredictions(RunFailure, ValueError):
    """A model predicted NaN or ±inf: it diverged, or its input broke it."""


def check_finite_predictions(y_pred: ArrayLike, names: Sequence[str]) -> None:
    """Raise NonFinitePredictions naming the molecules whose prediction is NaN, ±inf or
    beyond ±`MAX_ABS_VALUE` (whose squared errors are not finite).

    A diverged model otherwise turns every metric into NaN with no hint of which inputs
    broke it. ``names`` (mol ids or SMILES) is aligned with ``y_pred``; the message lists
    the first few names and the total count.
    """
    p = np.asarray(y_pred, dtype=float).ravel()
    if p.size != len(names):
        raise ValueError(f"y_pred has {p.size} values but names has {len(names)}")
    with np.errstate(invalid="ignore"):
        bad = np.flatnonzero(~np.isfinite(p) | (np.abs(p) > MAX_ABS_VALUE))
    if bad.size == 0:
        return
    shown = ", ".join(str(names[i]) for i in bad[:_MAX_NAMES_SHOWN])
    more = f", ... ({bad.size - _MAX_NAMES_SHOWN} more)" if bad.size > _MAX_NAMES_SHOWN else ""
    raise NonFinitePredictions(
        f"{bad.size} of {p.size} predictions are not finite (NaN/inf, or beyond "
        f"±{MAX_ABS_VALUE:g}): {shown}{more}"
    )
