"""Recalibration: z-scaling's closed form, split-conformal quantiles and their coverage."""

import math

import numpy as np
import pytest

from oodmol.uq.metrics import LEVELS, gaussian_nll, interval_coverage
from oodmol.uq.recalibrate import conformal_quantiles, zscaling_factor


def test_zscaling_factor_is_the_closed_form_and_minimises_nll():
    rng = np.random.default_rng(0)
    mu, sigma = rng.normal(size=500), rng.uniform(0.5, 1.5, size=500)
    y = mu + 3 * sigma * rng.normal(size=500)  # σ three times too small
    s = zscaling_factor(y, mu, sigma)
    assert s == pytest.approx(math.sqrt(np.mean(((y - mu) / sigma) ** 2)))
    assert s == pytest.approx(3, abs=0.3)
    best = gaussian_nll(y, mu, s * sigma)
    for other in (0.9 * s, 0.99 * s, 1.01 * s, 1.1 * s):
        assert gaussian_nll(y, mu, other * sigma) > best


def test_zscaling_hand_example():
    # z = [1, −3]: s² = (1 + 9) / 2 = 5
    assert zscaling_factor([1, -3], [0, 0], [1, 1]) == pytest.approx(math.sqrt(5))


def test_conformal_quantile_uses_the_finite_sample_rank():
    # scores 1 … 9 (n = 9): p = 0.5 -> k = ⌈10 · 0.5⌉ = 5 -> 5; p = 0.8 -> k = 8;
    # p = 0.95 -> k = ⌈9.5⌉ = 10 > n -> infinite interval
    y = np.arange(1.0, 10.0)
    q = conformal_quantiles(y, np.zeros(9), np.ones(9), levels=np.array([0.5, 0.8, 0.95]))
    assert q[0] == 5 and q[1] == 8 and math.isinf(q[2])


def test_conformal_coverage_is_at_least_nominal_on_exchangeable_data():
    # Heavy-tailed, heteroscedastic errors whose σ is wrong by a random factor: Gaussian
    # intervals would be off, conformal ones still cover ≥ p on average over draws.
    rng = np.random.default_rng(0)
    n_cal, n_test, repeats = 50, 50, 3000
    coverage = np.zeros(LEVELS.size)
    for _ in range(repeats):
        sigma = rng.uniform(0.2, 2.0, size=n_cal + n_test)
        err = sigma * rng.standard_t(df=3, size=sigma.size) * rng.uniform(0.5, 2, sigma.size)
        q = conformal_quantiles(err[:n_cal], np.zeros(n_cal), sigma[:n_cal])
        coverage += interval_coverage(np.abs(err[n_cal:]), q[:, None] * sigma[None, n_cal:])
    coverage /= repeats
    # expected coverage is ⌈(n + 1) p⌉ / (n + 1) ≥ p; the Monte Carlo error, dominated by
    # the calibration draw (sd ≈ 0.07 per repeat), is ≈ 0.0013
    assert np.all(coverage >= LEVELS - 0.005)
    assert coverage[np.isclose(LEVELS, 0.95)][0] >= 0.945
