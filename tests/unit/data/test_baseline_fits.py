"""The two lines Δ-learning's baseline can fit (`baseline.fit`), against known answers."""

from __future__ import annotations

import numpy as np
import pytest

from oodmol.lines import calibration_line, least_squares_line


def noisy_estimates(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A property y over a training range and two estimates that follow it with noise:
    x1 = 2 + 0.5 y + e1, x2 = −1 + 1.5 y + e2, e1 and e2 correlated."""
    rng = np.random.default_rng(seed)
    y = rng.uniform(-1.0, 1.0, n)
    noise = rng.multivariate_normal([0, 0], [[0.25, 0.1], [0.1, 0.5]], n)
    x = np.stack([2 + 0.5 * y, -1 + 1.5 * y], axis=1) + noise
    return x, y


def test_without_noise_both_fits_are_the_inverted_line() -> None:
    y = np.linspace(-2, 3, 7)
    x = (4.0 - 0.5 * y)[:, None]  # the estimate follows the property exactly
    w = np.ones(len(y))
    for line in (least_squares_line, calibration_line):
        intercept, slopes = line(x, y, w)
        assert (intercept, *slopes) == pytest.approx((8.0, -2.0))


def test_calibration_is_unbiased_in_a_tail_that_least_squares_pulls_in() -> None:
    """Fitted on properties in [−1, 1], both lines predict molecules of property 4: the
    calibration's mean lands on 4, least squares' falls short (regression dilution)."""
    x, y = noisy_estimates(20000)
    w = np.ones(len(y))
    rng = np.random.default_rng(1)
    tail = np.full(20000, 4.0)
    x_tail = np.stack([2 + 0.5 * tail, -1 + 1.5 * tail], axis=1) + rng.multivariate_normal(
        [0, 0], [[0.25, 0.1], [0.1, 0.5]], len(tail)
    )
    calibrated = calibration_line(x, y, w)
    squares = least_squares_line(x, y, w)
    mean = {
        name: float(np.mean(a + x_tail @ b))
        for name, (a, b) in (("calibration", calibrated), ("least_squares", squares))
    }
    assert mean["calibration"] == pytest.approx(4.0, abs=0.03)
    assert mean["least_squares"] < 3.0
    # within the training range least squares is the better line
    errors = {
        name: np.mean((a + x @ b - y) ** 2)
        for name, (a, b) in (("calibration", calibrated), ("least_squares", squares))
    }
    assert errors["least_squares"] < errors["calibration"]


def test_calibration_of_several_estimates_is_each_molecules_generalised_least_squares() -> None:
    """The line equals, molecule by molecule, the y that minimises (x − c − d·y)ᵀ S⁻¹
    (x − c − d·y) for the regressions' c, d and residual covariance S, solved by hand."""
    x, y = noisy_estimates(400, seed=2)
    w = np.ones(len(y))
    intercept, slopes = calibration_line(x, y, w)
    design = np.stack([np.ones(len(y)), y], axis=1)
    c, d = np.linalg.lstsq(design, x, rcond=None)[0]
    left = x - design @ np.stack([c, d])
    s_inv = np.linalg.inv(left.T @ left / len(y))
    for molecule in x[:20]:
        by_hand = (d @ s_inv @ (molecule - c)) / (d @ s_inv @ d)
        assert intercept + molecule @ slopes == pytest.approx(by_hand)


def test_a_weighted_calibration_counts_a_molecule_as_often_as_its_weight() -> None:
    x, y = noisy_estimates(30, seed=3)
    weights = np.arange(30) % 4 + 1
    repeated = np.repeat(np.arange(30), weights)
    weighted = calibration_line(x, y, weights.astype(float))
    plain = calibration_line(x[repeated], y[repeated], np.ones(len(repeated)))
    assert (weighted[0], *weighted[1]) == pytest.approx((plain[0], *plain[1]))
    unweighted = calibration_line(x, y, np.ones(30))
    assert unweighted[1][0] != pytest.approx(plain[1][0])


def test_calibration_stretches_the_least_squares_line_by_one_over_r_squared() -> None:
    """The classical and the inverse estimator share their direction (Sherman–Morrison):
    the calibration line is the least-squares line stretched about the training mean by
    1/R², R² that of the least-squares fit, weighted as it is."""
    x, y = noisy_estimates(500, seed=4)
    weights = np.random.default_rng(5).uniform(0.2, 3.0, len(y))
    a, b = least_squares_line(x, y, weights)
    mean = np.average(y, weights=weights)
    fitted = a + x @ b
    r_squared = 1 - np.average((y - fitted) ** 2, weights=weights) / np.average(
        (y - mean) ** 2, weights=weights
    )
    intercept, slopes = calibration_line(x, y, weights)
    np.testing.assert_allclose(slopes, b / r_squared, rtol=1e-9)
    np.testing.assert_allclose(intercept + x @ slopes, mean + (fitted - mean) / r_squared)


def test_a_calibration_of_an_estimate_that_ignores_the_property_is_refused_in_one_line() -> None:
    """An estimate constant over the training molecules has no gain to invert: the fit
    says so and names the way out, instead of a line of infinities."""
    from oodmol.data.baseline import LinearBaseline
    from oodmol.data.featurize.physics import PhysicsEstimates
    from oodmol.errors import InputError

    baseline = LinearBaseline(PhysicsEstimates(), "xtb_gap", fit="calibration")
    baseline.estimate = lambda ids: np.full((len(ids), 1), 0.3)  # the cache, stood in for
    with pytest.raises(InputError, match=r"fit=calibration cannot solve for it \(use baseline"):
        baseline.fit(np.arange(5), np.array([0.1, 0.5, 0.2, 0.9, 0.4]))
    with pytest.raises(InputError, match="fit=cubic: not a way to fit the baseline"):
        LinearBaseline(PhysicsEstimates(), "xtb_gap", fit="cubic")
