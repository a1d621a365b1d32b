"""Training weights that lean on the ends of the training range.

A KDE-tail split takes the rarest property values out of training, so every training
set ends where its OOD molecules begin, and a model fitted by plain least squares is
pulled towards the middle, where most of its molecules are: its predictions for the
tails fall short (the tail offset in every run's record). Imbalanced regression's
answer (density-based weighting: Yang et al., ICML 2021, "Delving into deep imbalanced
regression"; Steininger et al., Mach. Learn. 2021, "DenseWeight") is to weight each
training molecule by the inverse density of its property value, so the molecules at the
ends of the range count as much as those in the middle.

`TailWeights` gives training molecule i the weight p(y_i)^(-exponent), p a Gaussian KDE
of the training targets (standardised, Scott's bandwidth: scipy's `gaussian_kde`
default; `oodmol.data.splits.kde` computes it exactly), normalised to mean 1. Models fitted
once take the weights in their fit (a weighted forest, weighted least squares); neural
models draw each epoch's molecules with probability proportional to them
(`oodmol.data.sampling.EpochShuffle`), which has the weighted loss's expectation and needs
no change to any model. The weights depend on the training targets alone.
"""

from __future__ import annotations

import numpy as np

from oodmol.data.splits.kde import gaussian_kde_log_density
from oodmol.errors import InputError


class TailWeights:
    """Inverse-density weights of the training targets, p(y)^(-exponent), mean 1."""

    def __init__(self, exponent: float = 1.0, name: str = "tails") -> None:
        if isinstance(exponent, bool) or not isinstance(exponent, int | float) or exponent <= 0:
            raise InputError(
                f"weighting.exponent={exponent!r}: the inverse-density weights' exponent is "
                "a positive number (1: each value's weight the inverse of its density)"
            )
        self.exponent = float(exponent)
        self.name = name

    def __call__(self, targets: np.ndarray) -> np.ndarray:
        y = np.asarray(targets, dtype=np.float64)
        spread = y.std(ddof=1) if len(y) > 1 else 0.0
        if spread == 0:
            return np.ones(len(y))
        log_density = gaussian_kde_log_density((y - y.mean()) / spread)
        log_weight = -self.exponent * (log_density - log_density.mean())
        weights = np.exp(log_weight - log_weight.max())
        return weights / weights.mean()

    def facts(self, weights: np.ndarray) -> dict:
        """What the record says of the weights: the rule, the largest weight, and the
        effective number of molecules (Σw)² / Σw² (Kish)."""
        return {
            "name": self.name,
            "exponent": self.exponent,
            "max_weight": round(float(weights.max()), 4),
            "effective_molecules": round(float(weights.sum() ** 2 / (weights**2).sum()), 1),
        }
