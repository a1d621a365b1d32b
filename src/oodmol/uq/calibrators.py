"""Recalibration methods, registered by name: fitted on the validation set's total σ and
applied unchanged to each test set; `uq.calibrators` chooses which ones run. Each gives a
section of metrics.json's "uq_recalibrated": its fitted parameters, then a section per
test set. Formulas: `oodmol.uq.recalibrate`."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from oodmol.uq.metrics import LEVELS, SIGMA_FLOOR
from oodmol.uq.recalibrate import conformal_quantiles, zscaling_factor
from oodmol.uq.registry import Registry
from oodmol.uq.scored_set import ScoredSet

# Conformal intervals are intervals, not a distribution: these metrics are not defined
# for them (nll, ence) or equal the uncalibrated ones (a global scale of σ leaves
# rankings and Cv unchanged).
CONFORMAL_NOTE = (
    "interval metrics only: nll and ence need a predictive distribution, and spearman, "
    "auco, error_drop, decrease_ratio and cv are unchanged by a global scale of sigma "
    "(see the uncalibrated values)"
)


class Calibrator(ABC):
    """Fitted (`fit`, a new instance) on (y, μ, σ) of the calibration set, it turns a
    test set's σ into the uncertainty to score. `figure_label` names its curve in
    calibration.png (None: not drawn)."""

    figure_label: ClassVar[str | None] = None

    @classmethod
    @abstractmethod
    def fit(cls, y_true: np.ndarray, y_pred: np.ndarray, sigma: np.ndarray) -> Calibrator: ...

    @abstractmethod
    def parameters(self) -> dict:
        """What was fitted, for metrics.json."""

    @abstractmethod
    def apply(self, y_true: np.ndarray, y_pred: np.ndarray, sigma: np.ndarray) -> ScoredSet: ...


CALIBRATORS: Registry[Calibrator] = Registry("uncertainty calibrator")


@CALIBRATORS.register("zscaling")
@dataclass(frozen=True)
class ZScaling(Calibrator):
    """σ times the factor that minimises the validation NLL (Levi et al. 2022): still a
    Gaussian, so every metric applies."""

    figure_label: ClassVar[str | None] = "z-scaled"
    factor: float
    n_calibration: int

    @classmethod
    def fit(cls, y_true: np.ndarray, y_pred: np.ndarray, sigma: np.ndarray) -> ZScaling:
        return cls(zscaling_factor(y_true, y_pred, sigma), len(y_true))

    def parameters(self) -> dict:
        return {"factor": self.factor, "n_calibration": self.n_calibration}

    def apply(self, y_true: np.ndarray, y_pred: np.ndarray, sigma: np.ndarray) -> ScoredSet:
        return ScoredSet(y_true, y_pred, sigma=self.factor * sigma)


@CALIBRATORS.register("conformal")
@dataclass(frozen=True)
class Conformal(Calibrator):
    """Split-conformal intervals q_p σ with normalised scores: intervals with a coverage
    guarantee under exchangeability, but no distribution (see CONFORMAL_NOTE)."""

    quantiles: np.ndarray  # the multiplier of σ at each level of LEVELS
    n_calibration: int

    @classmethod
    def fit(cls, y_true: np.ndarray, y_pred: np.ndarray, sigma: np.ndarray) -> Conformal:
        return cls(conformal_quantiles(y_true, y_pred, sigma), len(y_true))

    def parameters(self) -> dict:
        return {
            "n_calibration": self.n_calibration,
            "quantile_68": float(self.quantiles[np.isclose(LEVELS, 0.68)][0]),
            "quantile_95": float(self.quantiles[np.isclose(LEVELS, 0.95)][0]),
            "note": CONFORMAL_NOTE,
        }

    def apply(self, y_true: np.ndarray, y_pred: np.ndarray, sigma: np.ndarray) -> ScoredSet:
        half_widths = self.quantiles[:, None] * np.maximum(sigma, SIGMA_FLOOR)[None, :]
        return ScoredSet(y_true, y_pred, half_widths=half_widths)
