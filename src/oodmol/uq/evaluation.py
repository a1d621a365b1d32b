"""Scoring a run's uncertainties: every metric per test set and uncertainty kind, before
and after recalibration on the validation set, plus the curves the figures draw."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from oodmol.uq.metrics import (
    LEVELS,
    SIGMA_FLOOR,
    calibration_verdict,
    confidence_curves,
    error_calibration,
    gaussian_coverage,
    interval_coverage,
    interval_metrics,
    uncertainty_metrics,
)
from oodmol.uq.recalibrate import conformal_quantiles, zscaling_factor

if TYPE_CHECKING:
    from oodmol.predictions import SetPredictions

TEST_SETS = ("id", "ood")
CALIBRATION_SET = "val"
# Conformal intervals are intervals, not a distribution: these metrics are not defined
# for them (nll, ence) or equal the uncalibrated ones (a global scale of σ leaves
# rankings and Cv unchanged).
CONFORMAL_NOTE = (
    "interval metrics only: nll and ence need a predictive distribution, and spearman, "
    "auco, error_drop, decrease_ratio and cv are unchanged by a global scale of sigma "
    "(see the uncalibrated values)"
)


@dataclass
class UncertaintyReport:
    """`metrics` holds the "uq" and "uq_recalibrated" sections of metrics.json; `curves`
    what the figures need, per test set."""

    metrics: dict
    curves: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)


def sigmas(s: SetPredictions) -> dict[str, np.ndarray]:
    """The uncertainty kinds a set has: total, and epistemic / aleatoric where known."""
    kinds = {
        "total": s.y_std,
        "epistemic": s.y_std_epistemic,
        "aleatoric": s.y_std_aleatoric,
    }
    return {kind: sigma for kind, sigma in kinds.items() if sigma is not None}


def _with_verdict(metrics: dict) -> dict:
    return {**metrics, "verdict": calibration_verdict(metrics["overconfidence"])}


def assess_uncertainty(
    sets: dict[str, SetPredictions], info: dict | None = None, bins: int = 10
) -> UncertaintyReport | None:
    """None when no test set has a σ. `info` is the run's "uq" header (method, member
    counts); a model's own σ without a uq method (the forest's tree spread) is "native"."""
    scored = {n: sets[n] for n in TEST_SETS if n in sets and sets[n].y_std is not None}
    if not scored:
        return None
    section = {k: v for k, v in (info or {}).items() if v is not None}
    if section.get("method", "none") == "none":
        section["method"] = "native"
    curves: dict[str, dict[str, np.ndarray]] = {}
    for name, s in scored.items():
        section[name] = {
            kind: _with_verdict(uncertainty_metrics(s.y_true, s.y_pred, sigma, bins))
            for kind, sigma in sigmas(s).items()
        }
        rmv, rmse = error_calibration(s.y_true, s.y_pred, s.y_std, bins)
        confidence, oracle = confidence_curves(s.y_true, s.y_pred, s.y_std)
        curves[name] = {
            "observed": gaussian_coverage(s.y_true, s.y_pred, s.y_std),
            "rmv": rmv,
            "rmse": rmse,
            "confidence": confidence,
            "oracle": oracle,
        }
    metrics = {"uq": section}
    val = sets.get(CALIBRATION_SET)
    if val is not None and val.y_std is not None and len(val.y_true):
        metrics["uq_recalibrated"] = recalibrated(val, scored, curves, bins)
    return UncertaintyReport(metrics, curves)


def recalibrated(
    val: SetPredictions,
    scored: dict[str, SetPredictions],
    curves: dict[str, dict[str, np.ndarray]],
    bins: int,
) -> dict:
    """z-scaling and split-conformal intervals fitted on `val` (total σ), scored on each
    test set; adds the z-scaled calibration curve to `curves`."""
    factor = zscaling_factor(val.y_true, val.y_pred, val.y_std)
    quantiles = conformal_quantiles(val.y_true, val.y_pred, val.y_std)
    n = len(val.y_true)
    zscaling: dict = {"factor": factor, "n_calibration": n}
    conformal: dict = {
        "n_calibration": n,
        "quantile_68": float(quantiles[np.isclose(LEVELS, 0.68)][0]),
        "quantile_95": float(quantiles[np.isclose(LEVELS, 0.95)][0]),
        "note": CONFORMAL_NOTE,
    }
    for name, s in scored.items():
        scaled = factor * s.y_std
        zscaling[name] = _with_verdict(uncertainty_metrics(s.y_true, s.y_pred, scaled, bins))
        curves[name]["observed_zscaled"] = gaussian_coverage(s.y_true, s.y_pred, scaled)
        half_width = quantiles[:, None] * np.maximum(s.y_std, SIGMA_FLOOR)[None, :]
        observed = interval_coverage(np.abs(s.y_true - s.y_pred), half_width)
        conformal[name] = _with_verdict(interval_metrics(observed))
    return {"zscaling": zscaling, "conformal": conformal}
