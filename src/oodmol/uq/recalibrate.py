"""Recalibration fitted on the validation set, applied unchanged to the ID and OOD sets.

Both methods keep the model's ranking of molecules (a positive scale on σ), so they
can fix how wide the intervals are on average but not which molecules get them.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from oodmol.uq.metrics import LEVELS, SIGMA_FLOOR


def zscaling_factor(y: ArrayLike, mu: ArrayLike, sigma: ArrayLike) -> float:
    """The s minimising the validation Gaussian NLL of (μ, s σ): with z_i = e_i / σ_i,
    NLL(s) = const + log s + mean(z²) / (2 s²), so dNLL/ds = 0 gives s² = mean(z²)
    (Levi et al. 2022, "std scaling"). NaN on an empty set."""
    y, mu, sigma = (np.asarray(a, dtype=float).ravel() for a in (y, mu, sigma))
    if y.size == 0:
        return math.nan
    z = (y - mu) / np.maximum(sigma, SIGMA_FLOOR)
    return float(np.sqrt(np.mean(z**2)))


def conformal_quantiles(
    y: ArrayLike, mu: ArrayLike, sigma: ArrayLike, levels: np.ndarray = LEVELS
) -> np.ndarray:
    """Split-conformal multipliers q_p of σ for each level p (normalised residuals).

    Scores r_i = |e_i| / σ_i on the n validation molecules; q_p is the k-th smallest score
    with k = ⌈(n + 1) p⌉ (the finite-sample correction), +inf when k > n. For a new
    molecule exchangeable with the validation set, P(|e| ≤ q_p σ) ≥ p (Vovk et al. 2005;
    Lei et al. 2018, normalised scores as in their locally weighted variant).
    """
    y, mu, sigma = (np.asarray(a, dtype=float).ravel() for a in (y, mu, sigma))
    scores = np.sort(np.abs(y - mu) / np.maximum(sigma, SIGMA_FLOOR))
    n = scores.size
    k = np.ceil(np.round((n + 1) * np.asarray(levels, dtype=float), 9)).astype(int)
    padded = np.append(scores, np.inf)
    return padded[np.clip(k, 1, n + 1) - 1]
