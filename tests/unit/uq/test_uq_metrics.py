"""Known-answer tests for the uncertainty metrics: hand examples, and synthetic data where
the true σ is known (calibrated, overconfident, uninformative)."""

import math

import numpy as np
import pytest

from oodmol.uq.metrics import (
    LEVELS,
    calibration_verdict,
    coefficient_of_variation,
    confidence_curves,
    ence,
    error_calibration,
    gaussian_coverage,
    gaussian_nll,
    interval_metrics,
    ranking_metrics,
    uncertainty_metrics,
)

N = 20_000


@pytest.fixture(scope="module")
def synthetic() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """y ~ N(μ, σ²) with heteroscedastic σ in [0.1, 2]: σ is exactly the truth."""
    rng = np.random.default_rng(0)
    mu = rng.normal(size=N)
    sigma = rng.uniform(0.1, 2.0, size=N)
    return mu + sigma * rng.normal(size=N), mu, sigma


def test_perfectly_calibrated_predictor(synthetic):
    y, mu, sigma = synthetic
    m = uncertainty_metrics(y, mu, sigma)
    assert m["miscalibration_area"] < 0.01
    assert m["mce"] < 0.02
    assert m["ence"] < 0.05
    assert abs(m["overconfidence"]) < 0.01
    assert m["coverage_68"] == pytest.approx(0.68, abs=0.015)
    assert m["coverage_95"] == pytest.approx(0.95, abs=0.01)
    np.testing.assert_allclose(gaussian_coverage(y, mu, sigma), LEVELS, atol=0.015)
    assert calibration_verdict(m["overconfidence"]) == "calibrated"
    # NLL of the true distribution: E[½ log(2πσ²)] + ½
    assert m["nll"] == pytest.approx(np.mean(0.5 * np.log(2 * np.pi * sigma**2)) + 0.5, abs=0.02)


def test_halved_sigma_is_overconfident(synthetic):
    y, mu, sigma = synthetic
    m = uncertainty_metrics(y, mu, sigma / 2)
    # the nominal 95 % interval ±1.96 σ/2 covers P(|Z| < 0.98) = 0.673
    assert m["coverage_95"] == pytest.approx(0.673, abs=0.015)
    assert m["overconfidence"] > 0.1
    assert m["overconfidence"] == pytest.approx(m["miscalibration_area"])  # one-sided gap
    assert calibration_verdict(m["overconfidence"]) == "overconfident"
    # every bin's RMSE is twice its RMV: ENCE = |RMV − 2 RMV| / RMV = 1
    assert m["ence"] == pytest.approx(1.0, abs=0.05)
    doubled = uncertainty_metrics(y, mu, sigma * 2)
    assert calibration_verdict(doubled["overconfidence"]) == "underconfident"


def test_shuffled_sigma_ranks_nothing(synthetic):
    y, mu, sigma = synthetic
    true = uncertainty_metrics(y, mu, sigma)
    shuffled = uncertainty_metrics(y, mu, np.random.default_rng(1).permutation(sigma))
    assert abs(shuffled["spearman"]) < 0.03
    assert true["spearman"] > 0.3
    # with σ ignored the confidence curve is flat at the overall RMSE (≈ 1.2 here) while the
    # oracle falls to 0, so their gap summed over 100 percentiles is tens of units
    assert shuffled["auco"] > 30
    assert shuffled["auco"] > 1.5 * true["auco"]
    assert shuffled["error_drop"] == pytest.approx(1.0, abs=0.15)
    assert true["error_drop"] > 5


def test_nll_hand_example():
    # e = [0, 2], σ = [1, 2]: ½ log 2π + 0 and ½ log 8π + 4/8
    expected = (0.5 * math.log(2 * math.pi) + 0.5 * math.log(8 * math.pi) + 0.5) / 2
    assert gaussian_nll([0, 2], [0, 0], [1, 2]) == pytest.approx(expected)


def test_error_calibration_and_ence_hand_example():
    # σ sorted [1, 1, 2, 2] into 2 bins; errors [1, 3] and [2, 2]:
    # bin 1: RMV 1, RMSE sqrt(5); bin 2: RMV 2, RMSE 2 -> ENCE = (sqrt(5) − 1) / 2
    rmv, rmse = error_calibration([1, 3, 2, -2], [0, 0, 0, 0], [1, 1, 2, 2], bins=2)
    np.testing.assert_allclose(rmv, [1, 2])
    np.testing.assert_allclose(rmse, [math.sqrt(5), 2])
    assert ence(rmv, rmse) == pytest.approx((math.sqrt(5) - 1) / 2)


def test_confidence_curve_hand_example():
    # 100 molecules, error i for molecule i; σ ranks them exactly (σ = i) -> curves equal
    err = np.arange(1.0, 101.0)
    conf, oracle = confidence_curves(err, np.zeros(100), err)
    np.testing.assert_allclose(conf, oracle)
    assert conf[0] == 1.0  # the 1 % most confident: molecule 1 alone
    assert conf[-1] == pytest.approx(math.sqrt(np.mean(err**2)))
    r = ranking_metrics(conf, oracle)
    assert r["auco"] == pytest.approx(0.0)
    assert r["decrease_ratio"] == 1.0
    assert r["error_drop"] == pytest.approx(conf[-1])
    # σ in reverse order: the most confident molecule has the largest error
    conf, oracle = confidence_curves(err, np.zeros(100), err[::-1])
    assert conf[0] == 100.0
    assert ranking_metrics(conf, oracle)["decrease_ratio"] == 0.0


def test_interval_metrics_hand_curve():
    # observed = p everywhere: no gap
    perfect = interval_metrics(LEVELS.copy())
    assert perfect["miscalibration_area"] == pytest.approx(0.0)
    assert perfect["mce"] == pytest.approx(0.0)
    # observed = 0 up to 0.99: the area is ∫₀^0.99 p dp = 0.49005, plus the last step,
    # where obs jumps to 1 at p = 1: trapezoid (0.99 + 0) / 2 · 0.01 = 0.00495
    worst = interval_metrics(np.zeros(LEVELS.size))
    assert worst["miscalibration_area"] == pytest.approx(0.49005 + 0.00495)
    assert worst["mce"] == pytest.approx(0.99)
    assert worst["coverage_95"] == 0.0


def test_coefficient_of_variation_hand_example():
    # σ = [1, 3]: mean 2, sample std sqrt(2) -> Cv = sqrt(2) / 2
    assert coefficient_of_variation([1, 3]) == pytest.approx(math.sqrt(2) / 2)
    assert coefficient_of_variation([2, 2, 2]) == 0.0
    assert math.isnan(coefficient_of_variation([1]))


def test_degenerate_sets_give_nan_not_errors():
    empty = uncertainty_metrics([], [], [])
    assert empty["n"] == 0
    assert all(math.isnan(v) for k, v in empty.items() if k != "n")
    constant = uncertainty_metrics([1, 2, 3], [1, 2, 3], [1, 1, 1])
    assert math.isnan(constant["spearman"])
    with pytest.raises(ValueError, match="non-negative"):
        gaussian_nll([1], [1], [-1])
