"""A model's predictions stretched by its validation line: the section `stretched` of
metrics.json.

A model fitted by least squares regresses to its training data's mean: on molecules like
the training ones its predictions ŷ follow the truth y with a slope below 1, and beyond
the training range that shrinkage becomes the tail offset. Regressing ŷ on y over the
validation molecules (ŷ ≈ c + d · y, classical calibration) measures it, and solving for
y, y ≈ (ŷ − c) / d, undoes it. Fitted on the validation set alone, like the uncertainty
recalibrations, and applied unchanged to the ID and OOD sets: the section scores those
stretched predictions with the same metrics as the run's own, so that every run says
whether undoing its shrinkage helps out of distribution (it costs error in the middle,
where the stretch also magnifies noise).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from oodmol.lines import calibration_line
from oodmol.metrics.sets import compute_metrics, extrapolation_section
from oodmol.predictions import SetPredictions

# fewer validation molecules than this give no line worth solving
MIN_VALIDATION = 3


def validation_line(val: SetPredictions) -> tuple[float, float]:
    """Intercept and slope of y ≈ a + b · ŷ, the validation line solved for y (NaN, NaN
    where it cannot be: too few molecules, or predictions that do not follow y)."""
    if len(val.y_true) < MIN_VALIDATION:
        return math.nan, math.nan
    ones = np.ones(len(val.y_true))
    intercept, slopes = calibration_line(val.y_pred[:, None], val.y_true, ones)
    return intercept, float(slopes[0])


def stretched_section(
    sets: Mapping[str, SetPredictions],
    train_median: float,
    train_range: tuple[float, float] | None,
) -> dict | None:
    """The stretch's line and the ID and OOD sets' metrics after it; None without a
    validation set and both test sets, and a `refused` reason where the line cannot be
    solved."""
    if not {"val", "id", "ood"} <= set(sets):
        return None
    intercept, slope = validation_line(sets["val"])
    section: dict = {"validation_molecules": len(sets["val"].y_true)}
    if not (math.isfinite(intercept) and math.isfinite(slope) and slope > 0):
        return section | {"refused": "the validation predictions do not rise with the property"}
    stretched = {
        name: replace(sets[name], y_pred=intercept + slope * sets[name].y_pred)
        for name in ("id", "ood")
    }
    section |= {"intercept": intercept, "slope": slope}
    section |= compute_metrics(stretched, train_median)
    section["extrapolation"] = extrapolation_section(stretched, train_median, train_range)
    return section
