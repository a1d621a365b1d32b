"""The member-combination rule against hand-computed values, for numpy and torch."""

import numpy as np
import pytest
import torch

from oodmol.uq.mixture import mixture


def test_plain_members_give_epistemic_variance_only():
    # molecule 1: means 1, 3, 5 -> mean 3, variance (4 + 0 + 4) / 3 = 8/3
    # molecule 2: means 2, 2, 8 -> mean 4, variance (4 + 4 + 16) / 3 = 8
    mean, epistemic, aleatoric = mixture(np.array([[1.0, 2.0], [3.0, 2.0], [5.0, 8.0]]))
    np.testing.assert_allclose(mean, [3, 4])
    np.testing.assert_allclose(epistemic, [8 / 3, 8])
    assert aleatoric is None


def test_mean_variance_members_add_aleatoric_variance():
    # two members, one molecule: means 0 and 2, variances 1 and 3
    # mean 1, epistemic ((−1)² + 1²) / 2 = 1, aleatoric (1 + 3) / 2 = 2, total 3
    # = the mixture's variance: E[σ² + μ²] − μ̄² = ((1 + 0) + (3 + 4)) / 2 − 1 = 3
    mean, epistemic, aleatoric = mixture(np.array([[0.0], [2.0]]), None, np.array([[1.0], [3.0]]))
    assert (mean[0], epistemic[0], aleatoric[0]) == (1.0, 1.0, 2.0)


def test_members_with_own_epistemic_variance_add_it():
    # forests or MC-dropout models as members: spread of means 1 plus mean own variance 0.5
    _, epistemic, _ = mixture(np.array([[0.0], [2.0]]), np.array([[0.25], [0.75]]))
    assert epistemic[0] == pytest.approx(1.5)


def test_torch_tensors_give_the_same_numbers():
    means = np.array([[1.0, 2.0], [3.0, 2.0], [5.0, 8.0]])
    alea = np.array([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]])
    expected = mixture(means, None, alea)
    got = mixture(torch.tensor(means), None, torch.tensor(alea))
    for e, g in zip(expected[::2], got[::2], strict=True):
        np.testing.assert_allclose(g.numpy(), e)
    np.testing.assert_allclose(got[1].numpy(), expected[1])
