"""Straight lines fitted to data two ways, for whoever needs one: Δ-learning's baseline
(`oodmol.data.baseline`) and the validation line that stretches a model's predictions
(`oodmol.metrics.stretch`).

Least squares regresses y on x: the best line for a molecule like the training ones,
and shrunk towards the mean wherever x is noisy. The calibration line (classical
calibration, or inverse regression) regresses x on y and solves for y: unbiased in the
tails where least squares is not, at the price of more variance in the middle.
"""

from __future__ import annotations

import numpy as np


def weighted_least_squares(design: np.ndarray, target: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The coefficients of `target` (a vector or columns) on `design`, each row counted by
    its weight."""
    root = np.sqrt(w)
    scaled = target * (root[:, None] if target.ndim == 2 else root)
    return np.linalg.lstsq(design * root[:, None], scaled, rcond=None)[0]


def least_squares_line(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[float, np.ndarray]:
    """Weighted least squares of y on the columns of x: intercept, slopes."""
    coefficients = weighted_least_squares(np.column_stack([np.ones(len(x)), x]), y, w)
    return float(coefficients[0]), coefficients[1:]


def calibration_line(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[float, np.ndarray]:
    """Each column of x regressed on y (x_k ≈ c_k + d_k · y, weighted), then y solved for
    by generalised least squares with the covariance S of the regressions' residuals:
    y = dᵀS⁻¹(x − c) / dᵀS⁻¹d, a line in x: intercept, slopes."""
    design = np.column_stack([np.ones(len(y)), y])
    coefficients = weighted_least_squares(design, x, w)
    offsets, gains = coefficients
    spread = np.sqrt(np.average((y - np.average(y, weights=w)) ** 2, weights=w))
    if np.all(np.abs(gains) * spread <= 1e-9 * np.abs(x).max(axis=0, initial=0)):
        return float("nan"), np.full(len(gains), np.nan)  # round-off, not a gain: refused
    left = x - design @ coefficients
    covariance = (left * w[:, None]).T @ left / w.sum()
    # a whisker on the diagonal keeps S invertible where an estimate follows y exactly
    # (the slopes do not depend on S's scale)
    whisker = 1e-10 * np.trace(covariance) / len(gains) + 1e-30
    toward = np.linalg.solve(covariance + whisker * np.eye(len(gains)), gains)  # S⁻¹d
    with np.errstate(divide="ignore", invalid="ignore"):  # no gain: not finite, refused
        slopes = toward / (gains @ toward)
    return float(-slopes @ offsets), slopes


# each line by the name `baseline.fit` gives it: (x, y, weights) → intercept, slopes
LINES = {"least_squares": least_squares_line, "calibration": calibration_line}
# the fit a run gets when it names none (and its records, keys and labels leave unsaid)
DEFAULT_LINE = "least_squares"
