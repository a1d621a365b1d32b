"""Training weights (`weighting=tails`): the inverse-density weights against scipy's KDE,
the weighted draws of the training sampler, and the weighted kernel fits against the
same fits on molecules repeated as often as their weight says."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import gaussian_kde

from oodmol.data.sampling import EpochShuffle
from oodmol.data.weighting import TailWeights
from oodmol.errors import InputError
from oodmol.models.fitted import kernel_regression as kr


def test_the_weights_are_the_inverse_density_of_scipys_kde() -> None:
    y = np.random.default_rng(0).gamma(2.0, 1.5, size=300) * 3.0 + 10.0
    weights = TailWeights(exponent=1.5)(y)
    density = gaussian_kde(y)(y)  # Scott's bandwidth on the sample's own spread
    expected = density**-1.5
    np.testing.assert_allclose(weights, expected / expected.mean(), rtol=1e-9)
    assert weights.mean() == pytest.approx(1.0)
    assert weights[np.argmax(y)] > 5 * weights[np.argmin(np.abs(y - np.median(y)))]


def test_the_weights_of_a_constant_target_are_all_one_and_a_bad_exponent_is_refused() -> None:
    np.testing.assert_array_equal(TailWeights()(np.full(5, 2.0)), np.ones(5))
    for exponent in (0, -1.0, True, "1"):
        with pytest.raises(InputError, match="exponent is a positive number"):
            TailWeights(exponent=exponent)


def test_weighted_epochs_draw_in_proportion_and_resume_where_they_stopped() -> None:
    weights = np.array([0.0, 1.0, 3.0, 0.0] * 250)
    dataset = list(range(len(weights)))
    shuffle = EpochShuffle(dataset, seed=3, weights=weights)
    drawn = np.fromiter(shuffle, dtype=np.int64)
    assert len(drawn) == len(dataset)
    assert set(drawn % 4) == {1, 2}  # weight 0: never drawn
    assert (drawn % 4 == 2).mean() == pytest.approx(0.75, abs=0.05)
    again = EpochShuffle(dataset, seed=3, weights=weights)
    again.resume_at(0, 600)
    np.testing.assert_array_equal(np.fromiter(again, dtype=np.int64), drawn[600:])
    shuffle.set_epoch(1)
    assert not np.array_equal(np.fromiter(shuffle, dtype=np.int64), drawn)
    with pytest.raises(ValueError, match="3 weights for 1000 molecules"):
        EpochShuffle(dataset, seed=0, weights=np.ones(3))


@pytest.fixture
def molecules() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(40, 3))
    y = np.sin(x[:, 0]) + 0.3 * x[:, 1] + 0.1 * rng.normal(size=40)
    counts = rng.integers(1, 4, size=40)
    return x, y, counts


@pytest.mark.parametrize("kernel", ["rbf", "linear"])
def test_a_weighted_fit_is_the_fit_on_each_molecule_repeated_weight_times(
    molecules, kernel: str
) -> None:
    """Weighted least squares with whole-number weights is least squares on the molecules
    repeated as often: dual (K + αW⁻¹) and feature-space solvers alike."""
    x, y, counts = molecules
    repeated = np.repeat(np.arange(len(x)), counts)
    probe = np.random.default_rng(2).normal(size=(7, 3))
    args = dict(length_scale=1.3, alpha=0.05, exact_molecules=1000, landmarks=0, seed=0)
    weighted = kr.fit(kernel, x, y, weights=counts.astype(float), variance=True, **args)
    plain = kr.fit(kernel, x[repeated], y[repeated], variance=True, **args)
    np.testing.assert_allclose(weighted.mean(probe), plain.mean(probe), rtol=1e-8, atol=1e-10)
    if kernel == "rbf":  # the GP's variance too: the repeated molecules' noise is α/w
        np.testing.assert_allclose(
            weighted.variance(probe) / weighted.signal_variance,
            plain.variance(probe) / plain.signal_variance,
            rtol=1e-6,
            atol=1e-10,
        )


def test_nystrom_on_every_molecule_is_the_exact_weighted_fit(molecules) -> None:
    x, y, counts = molecules
    probe = np.random.default_rng(3).normal(size=(5, 3))
    args = dict(length_scale=1.3, alpha=0.05, seed=0, variance=False)
    weights = counts.astype(float)
    exact = kr.fit("rbf", x, y, exact_molecules=1000, landmarks=0, weights=weights, **args)
    nystrom = kr.fit("rbf", x, y, exact_molecules=10, landmarks=len(x), weights=weights, **args)
    assert (exact.solver, nystrom.solver) == ("dual", "nystrom")
    np.testing.assert_allclose(nystrom.mean(probe), exact.mean(probe), rtol=1e-6, atol=1e-8)


def test_a_weighted_dual_model_comes_back_from_its_checkpoint(molecules) -> None:
    x, y, counts = molecules
    args = dict(length_scale=1.0, alpha=0.1, exact_molecules=1000, landmarks=0, seed=0)
    model = kr.fit("rbf", x, y, weights=counts.astype(float), variance=True, **args)
    assert torch.is_tensor(model.to_checkpoint()["noise"])
    loaded = kr.FittedKernelModel.from_checkpoint(model.to_checkpoint(), "test")
    # the training features are kept in float32
    np.testing.assert_allclose(loaded.variance(x[:4]), model.variance(x[:4]), rtol=1e-5)
    entry = model.to_checkpoint() | {"noise": [1.0, 2.0]}
    with pytest.raises(ValueError, match="'noise' is not a tensor"):
        kr.FittedKernelModel.from_checkpoint(entry, "test")


@pytest.mark.parametrize("kernel", ["rbf", "linear"])
def test_the_search_with_unit_weights_is_the_unweighted_search(molecules, kernel: str) -> None:
    x, y, _ = molecules
    args = (kernel, x, y, [0.5, 1.0, 2.0], kr.ALPHAS, 4, 0)
    plain, weighted = kr.search(*args), kr.search(*args, weights=np.ones(len(x)))
    np.testing.assert_allclose(weighted.rmse, plain.rmse, rtol=1e-9)
    assert (weighted.length_scale, weighted.alpha) == (plain.length_scale, plain.alpha)


def test_a_search_with_weights_scores_the_heavy_molecules_more(molecules) -> None:
    """Held-out errors are weighted as the fit is: a weight of zero makes a molecule's
    error count for nothing."""
    x, y, _ = molecules
    noisy = y.copy()
    noisy[:10] += 50.0
    weights = np.r_[np.zeros(10), np.ones(30)]
    args = ("rbf", x, noisy, [1.0], kr.ALPHAS, 4, 0)
    assert kr.search(*args, weights=weights).rmse.min() < 1.0 < kr.search(*args).rmse.min()
