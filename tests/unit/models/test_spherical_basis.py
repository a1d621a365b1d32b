"""DimeNet's spherical basis computed numerically, held to scipy's spherical Bessel
functions and to PyG's sympy-derived `SphericalBasisLayer`."""

import numpy as np
import pytest
import torch
from scipy import special
from torch_geometric.nn.models import dimenet
from torch_geometric.nn.models.dimenet_utils import Jn_zeros

from oodmol.models.blocks.spherical_basis import (
    SphericalBasis,
    series_coefficients,
    spherical_bessel,
    spherical_bessel_zeros,
)


def test_the_zeros_are_dimenets_float32_zeros():
    zeros = spherical_bessel_zeros(7, 6)
    np.testing.assert_array_equal(zeros, Jn_zeros(7, 6))
    assert np.abs(special.spherical_jn(np.arange(7)[:, None], zeros)).max() < 1e-6


@pytest.mark.parametrize("dtype, tolerance", [(torch.float64, 1e-14), (torch.float32, 1e-6)])
def test_bessel_functions_equal_scipys_from_short_bonds_to_the_cutoff(dtype, tolerance):
    """DimeNet++'s 7 orders at its 6 zeros each, from 0.02 to 1 of the cutoff: the range
    where the closed forms cancel (z < l) included."""
    orders = torch.arange(7)[:, None]
    x = torch.linspace(0.02, 1.0, 500, dtype=torch.float64)
    z = (x[:, None, None] * torch.tensor(spherical_bessel_zeros(7, 6), dtype=torch.float64)).to(
        dtype
    )
    expected = special.spherical_jn(orders.numpy(), z.double().numpy())
    actual = spherical_bessel(z, series_coefficients(7)).double().numpy()
    np.testing.assert_allclose(actual, expected, atol=tolerance)


def test_the_gradient_is_finite_on_both_sides_of_the_series():
    z = torch.linspace(0.01, 40.0, 4000, dtype=torch.float64).repeat(7, 1).requires_grad_()
    orders = torch.arange(7)[:, None]
    (grad,) = torch.autograd.grad(spherical_bessel(z, series_coefficients(7)).sum(), z)
    assert torch.isfinite(grad).all()
    expected = special.spherical_jn(orders.numpy(), z.detach().numpy(), derivative=True)
    np.testing.assert_allclose(grad.numpy(), expected, atol=1e-10)


def test_it_equals_pygs_sympy_basis_on_triplets():
    """3 × 2 functions (sympy's derivation takes seconds at DimeNet++'s 7 × 6), float64:
    equal to PyG's precision, the constants sympy writes into its expressions."""
    torch.manual_seed(0)
    dist = torch.rand(50, dtype=torch.float64) * 4.0 + 0.7
    angle = torch.rand(300, dtype=torch.float64) * torch.pi
    idx_kj = torch.randint(0, 50, (300,))
    ours = SphericalBasis(3, 2, cutoff=5.0, envelope_exponent=5).double()
    pyg = dimenet.SphericalBasisLayer(3, 2, cutoff=5.0, envelope_exponent=5)
    expected = pyg(dist, angle, idx_kj)
    torch.testing.assert_close(ours(dist, angle, idx_kj), expected, rtol=0, atol=2e-6)


def test_the_state_dict_holds_none_of_it():
    assert SphericalBasis(7, 6).state_dict() == {}
