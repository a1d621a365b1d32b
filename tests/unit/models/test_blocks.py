"""The 3D models' building blocks (`oodmol.models.blocks`): cutoffs, radial bases against
their definitions and PyG's versions, the neighbour embedding, the gated equivariant
block, the edge geometry and the initialisation."""

from __future__ import annotations

import math

import pytest
import torch
from geometry_helpers import point_cloud_batch, random_rotation
from torch import nn
from torch_geometric.nn.models import dimenet, schnet

from oodmol.models.blocks import (
    BesselBasis,
    CosineCutoff,
    Distance,
    ExpNormalBasis,
    GatedEquivariantBlock,
    GaussianBasis,
    NeighborEmbedding,
    PolynomialCutoff,
    xavier_init_linears,
)
from oodmol.models.neighbors import radius_graph

pytestmark = pytest.mark.usefixtures("one_thread")

R = torch.tensor([0.5, 2.0, 4.999, 5.0, 6.0])


def test_cosine_cutoff_falls_from_one_to_zero_at_the_cutoff():
    smooth = CosineCutoff(5.0)(torch.tensor([0.0, 2.5, 5.0, 7.0]))
    torch.testing.assert_close(smooth, torch.tensor([1.0, 0.5, 0.0, 0.0]))


@pytest.mark.parametrize("p", [3, 5, 6])
def test_polynomial_cutoff_and_its_first_two_derivatives_vanish_at_the_cutoff(p):
    cutoff = PolynomialCutoff(4.0, p)
    r = torch.tensor([0.0, 4.0 - 1e-6], dtype=torch.float64, requires_grad=True)
    u = cutoff(r)
    (du,) = torch.autograd.grad(u.sum(), r, create_graph=True)
    (d2u,) = torch.autograd.grad(du.sum(), r)
    torch.testing.assert_close(u.detach(), torch.tensor([1.0, 0.0], dtype=torch.float64))
    assert abs(du[1]) < 1e-5 and abs(d2u[1]) < 1e-3  # O(ε²) and O(ε) next to the cutoff
    assert cutoff(torch.tensor([4.0, 9.0])).tolist() == [0.0, 0.0]
    d = 0.3  # the defining polynomial at one point
    expected = 1 - (p + 1) * (p + 2) / 2 * d**p + p * (p + 2) * d ** (p + 1)
    expected -= p * (p + 1) / 2 * d ** (p + 2)
    assert cutoff(torch.tensor(4.0 * d, dtype=torch.float64)).item() == pytest.approx(expected)


def test_bessel_basis_with_the_polynomial_cutoff_is_dimenets_radial_basis():
    """PyG's `BesselBasisLayer` is u(d) sin(nπd)/d with d = r/r_c: r_c times ours (both
    built in float64: frequencies rounded to float32 differ in the 7th digit)."""
    r = torch.linspace(0.1, 6.0, 50, dtype=torch.float64)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        pyg = dimenet.BesselBasisLayer(num_radial=6, cutoff=5.0, envelope_exponent=5)
        bessel, envelope = BesselBasis(6, 5.0), PolynomialCutoff(5.0, p=6)
    finally:
        torch.set_default_dtype(default)
    ours = 5.0 * bessel(r) * envelope(r).unsqueeze(-1)
    torch.testing.assert_close(ours, pyg(r).detach())


def test_bessel_basis_values_and_its_normalised_form_is_orthonormal():
    sine = BesselBasis(20, 5.0)(R)
    assert sine.shape == (5, 20)
    torch.testing.assert_close(sine[1, 2], torch.sin(torch.tensor(3 * torch.pi * 2.0 / 5.0)) / 2.0)
    # √(2/r_c) sin(nπr/r_c)/r are orthonormal on [0, r_c] with the weight r² (MACE's)
    r = torch.linspace(1e-6, 5.0, 20001, dtype=torch.float64)
    basis = BesselBasis(4, 5.0, normalize=True).double()(r) * r.unsqueeze(-1)
    gram = torch.trapezoid(basis.unsqueeze(-1) * basis.unsqueeze(-2), r, dim=0)
    torch.testing.assert_close(gram, torch.eye(4, dtype=torch.float64), atol=1e-6, rtol=0)


def test_gaussian_basis_is_schnets():
    r = torch.linspace(0.0, 10.0, 40)
    torch.testing.assert_close(
        GaussianBasis(50, 10.0)(r), schnet.GaussianSmearing(0.0, 10.0, 50)(r)
    )
    with pytest.raises(ValueError, match="at least 2"):
        GaussianBasis(1, 5.0)


def test_expnorm_basis_tiles_the_range_under_the_cosine_cutoff():
    expnorm = ExpNormalBasis(64, 5.0)(R)
    assert expnorm.shape == (5, 64) and torch.all(expnorm[3:] == 0)  # zero from the cutoff
    # narrow functions (β ≈ 1000) that tile the range under the cutoff's envelope
    envelope = CosineCutoff(5.0)(R[:3])
    assert torch.all(expnorm[:3].max(dim=1).values > 0.9 * envelope) and expnorm.max() <= 1


@pytest.mark.parametrize(
    ("basis", "names"),
    [
        (lambda t: GaussianBasis(8, 5.0, trainable=t), {"offsets", "coeff"}),
        (lambda t: ExpNormalBasis(8, 5.0, trainable=t), {"means", "betas"}),
        (lambda t: BesselBasis(8, 5.0, trainable=t), {"frequencies"}),
    ],
)
def test_trainable_bases_learn_their_shape_and_fixed_ones_keep_it(basis, names):
    assert {name for name, _ in basis(True).named_parameters()} == names
    fixed = basis(False)
    assert not list(fixed.parameters()) and set(fixed.state_dict()) == names


def test_neighbor_embedding_is_eq_3_and_ignores_self_loops():
    torch.manual_seed(0)
    batch = point_cloud_batch(["CC(=O)O", "N#CC"])
    z, pos, molecule = batch.z, batch.pos.double(), batch.molecule
    embedding = NeighborEmbedding(hidden=8, num_rbf=6, cutoff=3.0).double()
    rbf = ExpNormalBasis(6, 3.0).double()
    x = torch.randn(len(z), 8, dtype=torch.float64)
    with torch.no_grad():
        plain, looped = Distance(3.0), Distance(3.0, loop=True)
        outputs = []
        for distance in (plain, looped):
            edges = distance(pos, molecule)
            outputs.append(embedding(z, x, edges.index, edges.length, rbf(edges.length)))
        torch.testing.assert_close(outputs[1], outputs[0])
        # atom by atom: x_i ← W_c [x_i ‖ Σ_j W_d(rbf(r_ij)) f_cut(r_ij) e′(z_j)]
        expected = []
        for i in range(len(z)):
            others = (molecule == molecule[i]) & (torch.arange(len(z)) != i)
            r = (pos[others] - pos[i]).norm(dim=-1)
            w = embedding.distance_proj(rbf(r)) * CosineCutoff(3.0)(r).unsqueeze(-1)
            summed = (w * embedding.embedding(z[others])).sum(0)
            expected.append(embedding.combine(torch.cat([x[i], summed])))
        torch.testing.assert_close(outputs[0], torch.stack(expected))


def test_gated_block_keeps_scalars_invariant_and_vectors_equivariant():
    torch.manual_seed(0)
    block = GatedEquivariantBlock(8, 4, 8, scalar_activation=True).double()
    s = torch.randn(5, 8, dtype=torch.float64)
    v = torch.randn(5, 3, 8, dtype=torch.float64)
    rotation = random_rotation(0, reflect=True)
    s_out, v_out = block(s, v)
    s_rot, v_rot = block(s, torch.einsum("ab,nbf->naf", rotation, v))
    assert s_out.shape == (5, 4) and v_out.shape == (5, 3, 4)
    torch.testing.assert_close(s_rot, s_out)
    torch.testing.assert_close(v_rot, torch.einsum("ab,nbf->naf", rotation, v_out))


@pytest.mark.parametrize("loop", [False, True])
def test_distance_gives_edge_vectors_lengths_and_directions(loop):
    batch = point_cloud_batch()
    pos = batch.pos.double().requires_grad_(True)
    edges = Distance(3.0, max_neighbors=6, loop=loop)(pos, batch.molecule)
    assert torch.equal(edges.index, radius_graph(pos, batch.molecule, 3.0, 6, loop))
    j, i = edges.index
    torch.testing.assert_close(edges.vector, pos[j] - pos[i])
    torch.testing.assert_close(edges.length, edges.vector.norm(dim=-1))
    is_loop = j == i
    assert is_loop.sum() == (len(pos) if loop else 0)
    unit = edges.direction[~is_loop]
    torch.testing.assert_close(unit, edges.vector[~is_loop] / edges.length[~is_loop, None])
    assert torch.all(edges.direction[is_loop] == 0) and torch.all(edges.length[is_loop] == 0)
    # self-loops must not poison the gradients (the norm of a zero vector would)
    (edges.length.sum() + edges.direction.sum()).backward()
    assert torch.isfinite(pos.grad).all()


def test_xavier_init_sets_every_linear_layer():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 300), nn.Tanh(), nn.Sequential(nn.Linear(300, 2)))
    xavier_init_linears(model)
    for layer in (model[0], model[2][0]):
        assert torch.all(layer.bias == 0)
        bound = math.sqrt(6 / (layer.in_features + layer.out_features))  # Glorot's
        assert layer.weight.abs().max() <= bound and layer.weight.abs().max() > 0.9 * bound
