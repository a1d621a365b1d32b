"""Uncertainty metrics for one test set: scoring rule, ranking, calibration, dispersion.

The set follows Scalia et al. 2020 ("Evaluating scalable uncertainty estimation methods
for deep learning-based molecular property prediction", J. Chem. Inf. Model. 60, 2697,
their section on evaluation metrics), who take ENCE and Cv from Levi et al. ("Evaluating
and calibrating uncertainty prediction in regression tasks", Sensors 22, 5540, 2022)
and the interval calibration curve from Kuleshov et al. 2018. Papers are cited by
section, not equation number; each docstring writes its formula out in full, and where
a paper leaves a choice open (error measure of the confidence curve, integration rule of
the area) the choice made here is stated.

Notation: y_i true value, μ_i predicted mean, σ_i predicted standard deviation,
e_i = y_i − μ_i, N molecules. Like the regression metrics, an undefined value (empty set,
constant input) is NaN rather than an exception, so one degenerate set cannot abort a
benchmark run.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike
from scipy.stats import norm, spearmanr

# Central-interval probabilities p of the calibration curve: 0.01, 0.02, ..., 0.99.
LEVELS = np.round(np.arange(1, 100) / 100, 2)
# Percentages n of the confidence curve: the n % most confident molecules, n = 1 ... 100.
PERCENTS = np.arange(1, 101)
# A σ of exactly zero would divide by zero in z-scores; it is raised to this.
SIGMA_FLOOR = 1e-12
NAN = float("nan")


def _arrays(y: ArrayLike, mu: ArrayLike, sigma: ArrayLike) -> tuple[np.ndarray, ...]:
    y, mu, sigma = (np.asarray(a, dtype=float).ravel() for a in (y, mu, sigma))
    if not (y.shape == mu.shape == sigma.shape):
        raise ValueError(f"lengths differ: y {y.size}, mu {mu.size}, sigma {sigma.size}")
    if np.any(sigma < 0):
        raise ValueError("sigma must be non-negative")
    return y, mu, np.maximum(sigma, SIGMA_FLOOR)


def gaussian_nll(y: ArrayLike, mu: ArrayLike, sigma: ArrayLike) -> float:
    """Mean Gaussian negative log-likelihood, constant included:
    NLL = (1/N) Σ_i [½ log(2π σ_i²) + e_i² / (2 σ_i²)]."""
    y, mu, sigma = _arrays(y, mu, sigma)
    if y.size == 0:
        return NAN
    return float(np.mean(0.5 * np.log(2 * np.pi * sigma**2) + (y - mu) ** 2 / (2 * sigma**2)))


def error_spearman(y: ArrayLike, mu: ArrayLike, sigma: ArrayLike) -> float:
    """Spearman ρ between |e_i| and σ_i (average ranks for ties); NaN when either is
    constant or N < 2. Ranking quality: does a larger σ mean a larger error?"""
    y, mu, sigma = _arrays(y, mu, sigma)
    err = np.abs(y - mu)
    if y.size < 2 or np.ptp(err) == 0 or np.ptp(sigma) == 0:
        return NAN
    return float(spearmanr(err, sigma).statistic)


def gaussian_coverage(
    y: ArrayLike, mu: ArrayLike, sigma: ArrayLike, levels: np.ndarray = LEVELS
) -> np.ndarray:
    """Observed coverage of the central Gaussian p-intervals (the calibration curve):
    obs(p) = (1/N) Σ_i 1[|e_i| ≤ z_p σ_i], z_p = Φ⁻¹((1 + p) / 2), for each p in levels."""
    y, mu, sigma = _arrays(y, mu, sigma)
    z = norm.ppf((1 + np.asarray(levels)) / 2)
    return interval_coverage(np.abs(y - mu), z[:, None] * sigma[None, :])


def interval_coverage(abs_error: np.ndarray, half_width: np.ndarray) -> np.ndarray:
    """Fraction of molecules with |e_i| ≤ half_width[p, i], one value per row p (NaN when
    N = 0). Shared by Gaussian and conformal intervals."""
    if abs_error.size == 0:
        return np.full(half_width.shape[0], NAN)
    return np.mean(abs_error[None, :] <= half_width, axis=1)


def interval_metrics(observed: np.ndarray, levels: np.ndarray = LEVELS) -> dict[str, float]:
    """Summaries of a calibration curve obs(p) over the levels p:

    - miscalibration_area (AUCE) = ∫₀¹ |obs(p) − p| dp, trapezoid rule on {0} ∪ levels ∪ {1}
      with obs(0) = 0 and obs(1) = 1 (the empty and the infinite interval); 0 is perfect,
      0.5 the worst possible.
    - mce = max_p |obs(p) − p| over the levels.
    - overconfidence = ∫₀¹ (p − obs(p)) dp, same rule: the signed area, > 0 when intervals
      are too narrow (overconfident), < 0 when too wide.
    - coverage_68, coverage_95 = obs(0.68), obs(0.95).
    """
    levels = np.asarray(levels, dtype=float)
    if np.isnan(observed).any():
        return dict.fromkeys(
            ("miscalibration_area", "mce", "overconfidence", "coverage_68", "coverage_95"), NAN
        )
    p = np.concatenate([[0.0], levels, [1.0]])
    obs = np.concatenate([[0.0], observed, [1.0]])
    return {
        "miscalibration_area": float(np.trapezoid(np.abs(obs - p), p)),
        "mce": float(np.max(np.abs(observed - levels))),
        "overconfidence": float(np.trapezoid(p - obs, p)),
        "coverage_68": float(observed[np.isclose(levels, 0.68)][0]),
        "coverage_95": float(observed[np.isclose(levels, 0.95)][0]),
    }


def error_calibration(
    y: ArrayLike, mu: ArrayLike, sigma: ArrayLike, bins: int = 10
) -> tuple[np.ndarray, np.ndarray]:
    """Error-based calibration (Levi et al.): molecules sorted by σ into K = min(bins, N)
    bins of equal count (sizes differ by at most one); per bin k the root mean variance
    RMV_k = sqrt(mean_{i∈k} σ_i²) and RMSE_k = sqrt(mean_{i∈k} e_i²). Returns (RMV, RMSE),
    ordered from the most to the least confident bin; calibrated means RMV_k = RMSE_k."""
    y, mu, sigma = _arrays(y, mu, sigma)
    groups = np.array_split(np.argsort(sigma, kind="stable"), max(min(bins, y.size), 1))
    groups = [g for g in groups if g.size]
    rmv = np.array([np.sqrt(np.mean(sigma[g] ** 2)) for g in groups])
    rmse = np.array([np.sqrt(np.mean((y[g] - mu[g]) ** 2)) for g in groups])
    return rmv, rmse


def ence(rmv: np.ndarray, rmse: np.ndarray) -> float:
    """Expected normalised calibration error: ENCE = (1/K) Σ_k |RMV_k − RMSE_k| / RMV_k."""
    return float(np.mean(np.abs(rmv - rmse) / rmv)) if rmv.size else NAN


def confidence_curves(
    y: ArrayLike, mu: ArrayLike, sigma: ArrayLike
) -> tuple[np.ndarray, np.ndarray]:
    """Confidence and oracle curves: for n = 1 … 100, the RMSE of the ⌈n N / 100⌉
    molecules with the smallest σ (confidence) and with the smallest |e| (oracle).
    The oracle is the best any ranking can do, so confidence ≥ oracle pointwise; the
    curves meet at n = 100 (all molecules). Ties in σ keep the input order."""
    y, mu, sigma = _arrays(y, mu, sigma)
    sq = (y - mu) ** 2
    if y.size == 0:
        return np.full(PERCENTS.size, NAN), np.full(PERCENTS.size, NAN)
    keep = np.ceil(PERCENTS * y.size / 100).astype(int)

    def curve(order: np.ndarray) -> np.ndarray:
        running = np.cumsum(sq[order])
        return np.sqrt(running[keep - 1] / keep)

    return curve(np.argsort(sigma, kind="stable")), curve(np.argsort(sq, kind="stable"))


def ranking_metrics(confidence: np.ndarray, oracle: np.ndarray) -> dict[str, float]:
    """Summaries of the confidence curve c_n (n = 1 … 100) and the oracle curve o_n:

    - auco = Σ_n (c_n − o_n): area between confidence and oracle curve (0 when σ orders
      the molecules exactly as their errors do), in the property's units.
    - error_drop = c_100 / c_1: error on all molecules over the error on the 1 % most
      confident (> 1 when removing uncertain molecules helps; NaN when c_1 = 0).
    - decrease_ratio = (1/99) Σ_{n=2}^{100} 1[c_{n−1} ≤ c_n]: read as molecules are
      removed from the most uncertain end (n from 100 down to 1), the fraction of steps
      where the error does not rise; 1 for a monotone curve.
    """
    if np.isnan(confidence).any():
        return {"auco": NAN, "error_drop": NAN, "decrease_ratio": NAN}
    drop = confidence[-1] / confidence[0] if confidence[0] > 0 else NAN
    return {
        "auco": float(np.sum(confidence - oracle)),
        "error_drop": float(drop),
        "decrease_ratio": float(np.mean(confidence[:-1] <= confidence[1:])),
    }


def coefficient_of_variation(sigma: ArrayLike) -> float:
    """Dispersion of the uncertainties (Levi et al.):
    Cv = sqrt(Σ_i (σ_i − σ̄)² / (N − 1)) / σ̄, σ̄ = mean σ. A Cv near 0 means every
    molecule gets about the same σ, so σ cannot tell molecules apart. NaN when N < 2."""
    sigma = np.asarray(sigma, dtype=float).ravel()
    if sigma.size < 2 or sigma.mean() <= 0:
        return NAN
    return float(np.std(sigma, ddof=1) / sigma.mean())


def uncertainty_metrics(
    y: ArrayLike, mu: ArrayLike, sigma: ArrayLike, bins: int = 10
) -> dict[str, float]:
    """Every metric of one set with one σ in one call: nll, spearman, the
    interval-calibration summaries, ence, the ranking summaries and cv (see the functions
    above). Runs score through `oodmol.uq.evaluators`, which give exactly these values."""
    rmv, rmse = error_calibration(y, mu, sigma, bins)
    out = {"n": int(np.asarray(y).size), "nll": gaussian_nll(y, mu, sigma)}
    out["spearman"] = error_spearman(y, mu, sigma)
    out.update(interval_metrics(gaussian_coverage(y, mu, sigma)))
    out["ence"] = ence(rmv, rmse)
    out.update(ranking_metrics(*confidence_curves(y, mu, sigma)))
    out["cv"] = coefficient_of_variation(sigma)
    return out


def calibration_verdict(overconfidence: float, tolerance: float = 0.05) -> str:
    """'overconfident' / 'underconfident' when the signed calibration area exceeds the
    tolerance either way, else 'calibrated' ('undefined' for NaN)."""
    if math.isnan(overconfidence):
        return "undefined"
    if overconfidence > tolerance:
        return "overconfident"
    return "underconfident" if overconfidence < -tolerance else "calibrated"
