"""The fast KDE must reproduce scikit-learn's ``score_samples`` and BOOM's lowest-density cut."""

from __future__ import annotations

import functools
import zlib

import numpy as np
import pytest
from sklearn.neighbors import KernelDensity

from oodmol.data.splits.kde import (
    gaussian_kde_log_density,
    lowest_density_indices,
    scott_bandwidth,
)


def _sample(name: str) -> np.ndarray:
    """Seeded samples covering the regimes of QM9's properties (kept small: sklearn is O(n^2))."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    if name == "normal":
        return rng.normal(size=1500)
    if name == "mixture":
        return np.concatenate(
            [rng.normal(-3.0, 0.3, 600), rng.normal(0.0, 1.0, 900), rng.normal(5.0, 0.1, 300)]
        )
    if name == "student_t":
        return rng.standard_t(1.5, 1500)
    if name == "cauchy":
        return rng.standard_cauchy(1000)
    if name == "lognormal":
        return rng.lognormal(0.0, 1.5, 1500)
    if name == "quantized_2dp":
        return np.round(rng.normal(size=3000), 2)
    if name == "quantized_4dp":
        return np.round(rng.gamma(2.0, 0.05, 2500), 4)
    if name == "narrow":  # like HOMO: range far below the bandwidth, 4 decimals
        return np.round(rng.normal(-0.25, 0.02, 2000), 4)
    if name == "wide":  # like R2: values in the thousands, range far above the bandwidth
        return rng.gamma(9.0, 130.0, 2000)
    if name == "small":
        return rng.exponential(size=40)
    if name == "tiny":
        return rng.normal(size=5)
    raise KeyError(name)


CASES = [
    "normal",
    "mixture",
    "student_t",
    "cauchy",
    "lognormal",
    "quantized_2dp",
    "quantized_4dp",
    "narrow",
    "wide",
    "small",
    "tiny",
]

# Two lone values near each other have exactly equal densities; scikit-learn splits such a pair by
# its rounding noise (~1e-14 here) where we tie it and break by id.  The R2-like sample has some.
MATHEMATICAL_TIES = {"wide"}


@functools.cache
def _case(name: str) -> tuple[np.ndarray, np.ndarray]:
    """A sample and scikit-learn's scores for it (cached: the slow part of this file)."""
    y = _sample(name)
    kde = KernelDensity(kernel="gaussian", bandwidth="scott").fit(y[:, None])
    return y, kde.score_samples(y[:, None])


def _direct_log_density(y: np.ndarray, h: float) -> np.ndarray:
    """Slow reference: the O(n^2) float64 kernel sum, normalised as scikit-learn does."""
    d = (y[:, None] - y[None, :]) / h
    sums = np.exp(-0.5 * d * d).sum(axis=1)
    return np.log(sums) - np.log(y.size) - np.log(h * np.sqrt(2.0 * np.pi))


def _ids(n: int, seed: int) -> np.ndarray:
    """Shuffled, non-contiguous molecule ids, so rank order cannot follow input order."""
    return np.random.default_rng(seed).permutation(n).astype(np.int64) * 7 + 3


@pytest.mark.parametrize("name", CASES)
def test_matches_sklearn_score_samples(name: str) -> None:
    y, expected = _case(name)
    np.testing.assert_allclose(gaussian_kde_log_density(y), expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", CASES)
def test_matches_direct_sum(name: str) -> None:
    y, _ = _case(name)
    expected = _direct_log_density(y, y.size ** (-0.2))
    np.testing.assert_allclose(gaussian_kde_log_density(y), expected, rtol=1e-13, atol=1e-13)


def test_explicit_bandwidth_matches_sklearn() -> None:
    y, _ = _case("mixture")
    expected = KernelDensity(kernel="gaussian", bandwidth=0.037).fit(y[:, None])
    np.testing.assert_allclose(
        gaussian_kde_log_density(y, bandwidth=0.037),
        expected.score_samples(y[:, None]),
        rtol=1e-10,
        atol=1e-10,
    )


@pytest.mark.parametrize("n", [1, 7, 130_831])
def test_scott_bandwidth_is_sklearns(n: int) -> None:
    kde = KernelDensity(kernel="gaussian", bandwidth="scott").fit(np.zeros((n, 1)))
    assert scott_bandwidth(n) == kde.bandwidth_


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("fraction", [0.05, 0.3])
def test_lowest_density_matches_sklearn_ranking(name: str, fraction: float) -> None:
    y, scores = _case(name)
    ids = _ids(y.size, seed=zlib.crc32(name.encode()) + 1)
    n_select = max(1, round(fraction * y.size))
    expected = np.lexsort((ids, scores))[:n_select]
    selected = lowest_density_indices(y, n_select, ids)
    if name in MATHEMATICAL_TIES:
        # Rank by rank, the same molecule or one whose score agrees to well within sklearn's
        # own error: only the members of such pairs may trade places.
        np.testing.assert_allclose(scores[selected], scores[expected], rtol=0, atol=1e-12)
    else:
        np.testing.assert_array_equal(selected, expected)


def test_ties_straddling_the_cut_go_to_smallest_ids() -> None:
    y, scores = _case("quantized_2dp")
    ids = _ids(y.size, seed=11)
    order = np.lexsort((ids, scores))
    # Cut inside a group of equal values, so only part of the group is selected.
    straddling = np.flatnonzero(y[order][1:] == y[order][:-1])
    n_select = int(straddling[len(straddling) // 10]) + 1
    tied = np.flatnonzero(y == y[order[n_select - 1]])
    assert y[order[n_select]] == y[order[n_select - 1]]

    selected = lowest_density_indices(y, n_select, ids)
    np.testing.assert_array_equal(selected, order[:n_select])
    chosen = np.intersect1d(selected, tied)
    assert 0 < chosen.size < tied.size
    assert ids[chosen].max() < np.setdiff1d(ids[tied], ids[chosen]).min()


def test_equal_values_get_bitwise_equal_log_densities() -> None:
    rng = np.random.default_rng(3)
    y = np.round(rng.standard_t(3.0, 4000), 1)
    y[:10] = -0.0  # -0.0 and 0.0 are equal values too
    log_density = gaussian_kde_log_density(y)
    for value in np.unique(y):
        assert np.unique(log_density[y == value]).size == 1
    permutation = rng.permutation(y.size)
    np.testing.assert_array_equal(
        gaussian_kde_log_density(y[permutation]), log_density[permutation]
    )


def test_lone_values_get_exactly_the_self_term_density() -> None:
    y = np.concatenate([np.random.default_rng(5).normal(size=500), [40.0, 1e12, -3e15]])
    h = scott_bandwidth(y.size)
    self_term_only = (0.0 + (-0.5 * np.log(2.0 * np.pi) - np.log(h))) - np.log(y.size)
    log_density = gaussian_kde_log_density(y)
    assert np.isfinite(log_density).all()
    assert (log_density[-3:] == self_term_only).all()
    ids = np.arange(y.size)[::-1].copy()
    np.testing.assert_array_equal(
        lowest_density_indices(y, 3, ids), [y.size - 1, y.size - 2, y.size - 3]
    )


@pytest.mark.parametrize(
    "values",
    [np.array([]), np.array([0.0, np.nan, 1.0]), np.array([np.inf, 0.0]), np.zeros((3, 2))],
)
def test_invalid_values_raise(values: np.ndarray) -> None:
    with pytest.raises(ValueError):
        gaussian_kde_log_density(values)
    with pytest.raises(ValueError):
        lowest_density_indices(values, 0, np.arange(len(values)))


def test_error_names_non_finite_entries() -> None:
    with pytest.raises(ValueError, match=r"2 non-finite entries \(first at indices \[1, 3\]\)"):
        gaussian_kde_log_density(np.array([0.0, np.nan, 1.0, -np.inf]))


@pytest.mark.parametrize("bandwidth", [0.0, -1.0, np.nan, np.inf])
def test_invalid_bandwidth_raises(bandwidth: float) -> None:
    with pytest.raises(ValueError):
        gaussian_kde_log_density(np.arange(5.0), bandwidth=bandwidth)


@pytest.mark.parametrize("n_select", [-1, 6])
def test_n_select_out_of_range_raises(n_select: int) -> None:
    with pytest.raises(ValueError, match="n_select"):
        lowest_density_indices(np.arange(5.0), n_select, np.arange(5))


def test_n_select_bounds_are_inclusive() -> None:
    y = np.array([0.0, 0.1, 5.0, 0.2, 9.0])
    assert lowest_density_indices(y, 0, np.arange(5)).size == 0
    assert sorted(lowest_density_indices(y, 5, np.arange(5))) == list(range(5))


@pytest.mark.parametrize(
    "tie_break",
    [np.arange(4), np.array([0, 1, 2, 3, 3]), np.arange(5.0)],
    ids=["wrong-length", "duplicate-ids", "float-ids"],
)
def test_invalid_tie_break_raises(tie_break: np.ndarray) -> None:
    with pytest.raises(ValueError, match="tie_break"):
        lowest_density_indices(np.arange(5.0), 2, tie_break)


def test_scott_bandwidth_needs_a_sample() -> None:
    with pytest.raises(ValueError):
        scott_bandwidth(0)
