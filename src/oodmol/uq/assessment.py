"""Scoring a run's uncertainties: the chosen evaluators on each test set and uncertainty
kind, then again on each test set as each chosen calibrator, fitted on the validation
set, recalibrates its total σ; plus the curves the figures draw."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from oodmol.predictions import SetPredictions
from oodmol.uq.calibrators import CALIBRATORS
from oodmol.uq.evaluators import EVALUATORS, evaluate
from oodmol.uq.plots import SetCurves
from oodmol.uq.scored_set import ScoredSet

TEST_SETS = ("id", "ood")
CALIBRATION_SET = "val"


@dataclass
class UncertaintyReport:
    """`metrics` holds the "uq" and "uq_recalibrated" sections of metrics.json; `curves`
    what the figures need, per test set."""

    metrics: dict
    curves: dict[str, SetCurves] = field(default_factory=dict)


def sigmas(s: SetPredictions) -> dict[str, np.ndarray]:
    """The uncertainty kinds a set has: total, and epistemic / aleatoric where known."""
    kinds = {
        "total": s.y_std,
        "epistemic": s.y_std_epistemic,
        "aleatoric": s.y_std_aleatoric,
    }
    return {kind: sigma for kind, sigma in kinds.items() if sigma is not None}


def assess_uncertainty(
    sets: Mapping[str, SetPredictions],
    info: dict | None = None,
    calibrators: Iterable[str] | None = None,
    evaluators: Iterable[str] | None = None,
) -> UncertaintyReport | None:
    """None when no test set has a σ. `info` is the run's "uq" header (method, member
    counts); a model's own σ without a uq method (the forest's tree spread) is "native".
    `calibrators` and `evaluators` name those to run (None: every registered one); an
    unknown name is refused even when there is nothing to score."""
    calibrators, evaluators = CALIBRATORS.select(calibrators), EVALUATORS.select(evaluators)
    scored = {n: sets[n] for n in TEST_SETS if n in sets and sets[n].y_std is not None}
    if not scored:
        return None
    section = {k: v for k, v in (info or {}).items() if v is not None}
    if section.get("method", "none") == "none":
        section["method"] = "native"
    curves = {}
    for name, s in scored.items():
        kinds = {kind: ScoredSet(s.y_true, s.y_pred, sigma) for kind, sigma in sigmas(s).items()}
        section[name] = {kind: evaluate(k, evaluators) for kind, k in kinds.items()}
        total = kinds["total"]
        curves[name] = SetCurves(total.coverage, *total.error_bins, *total.confidence)
    metrics = {"uq": section}
    val = sets.get(CALIBRATION_SET)
    if calibrators and val is not None and val.y_std is not None and len(val.y_true):
        metrics["uq_recalibrated"] = recalibrated(val, scored, calibrators, evaluators, curves)
    return UncertaintyReport(metrics, curves)


def recalibrated(
    val: SetPredictions,
    scored: Mapping[str, SetPredictions],
    calibrators: list[str],
    evaluators: list[str],
    curves: dict[str, SetCurves],
) -> dict:
    """Each calibrator fitted on `val` (total σ) and scored on each test set; adds the
    recalibrated calibration curves that the figure draws to `curves`."""
    sections = {}
    for name in calibrators:
        calibrator = CALIBRATORS[name].fit(val.y_true, val.y_pred, val.y_std)
        section = calibrator.parameters()
        for set_name, s in scored.items():
            recalibrated_set = calibrator.apply(s.y_true, s.y_pred, s.y_std)
            section[set_name] = evaluate(recalibrated_set, evaluators)
            if calibrator.figure_label is not None:
                curves[set_name].recalibrated[calibrator.figure_label] = recalibrated_set.coverage
        sections[name] = section
    return sections
