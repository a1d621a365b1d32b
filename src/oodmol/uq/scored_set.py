"""One test set with the uncertainty it is scored by, and the curves that the metrics and
figures read from it, each computed once however many evaluators read it."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from oodmol.uq.metrics import (
    confidence_curves,
    error_calibration,
    gaussian_coverage,
    interval_coverage,
    interval_metrics,
    ranking_metrics,
)


@dataclass(frozen=True)
class ScoredSet:
    """Targets and predicted means with either a Gaussian σ per molecule (a predictive
    distribution, which every metric can score) or only central intervals: half-widths
    per level of `metrics.LEVELS` and molecule (conformal intervals), which only the
    interval metrics can score."""

    y_true: np.ndarray
    y_pred: np.ndarray
    sigma: np.ndarray | None = None
    half_widths: np.ndarray | None = None

    def __post_init__(self) -> None:
        if (self.sigma is None) == (self.half_widths is None):
            raise ValueError("a scored set has either a sigma or interval half-widths")

    @property
    def is_distribution(self) -> bool:
        return self.sigma is not None

    @cached_property
    def coverage(self) -> np.ndarray:
        """Observed coverage of the central intervals at each level (calibration curve)."""
        if self.sigma is not None:
            return gaussian_coverage(self.y_true, self.y_pred, self.sigma)
        return interval_coverage(np.abs(self.y_true - self.y_pred), self.half_widths)

    @cached_property
    def calibration(self) -> dict[str, float]:
        """The calibration curve's summaries (`metrics.interval_metrics`)."""
        return interval_metrics(self.coverage)

    @cached_property
    def error_bins(self) -> tuple[np.ndarray, np.ndarray]:
        """RMV and RMSE per σ bin (`metrics.error_calibration`)."""
        return error_calibration(self.y_true, self.y_pred, self._sigma)

    @cached_property
    def confidence(self) -> tuple[np.ndarray, np.ndarray]:
        """Confidence and oracle curves (`metrics.confidence_curves`)."""
        return confidence_curves(self.y_true, self.y_pred, self._sigma)

    @cached_property
    def ranking(self) -> dict[str, float]:
        """The confidence curve's summaries (`metrics.ranking_metrics`)."""
        return ranking_metrics(*self.confidence)

    @property
    def _sigma(self) -> np.ndarray:
        if self.sigma is None:
            raise ValueError("intervals without a sigma have no σ bins or σ ranking")
        return self.sigma
