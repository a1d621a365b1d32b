"""The output modules of the 3D backbones (`oodmol.models.output_modules`): the dipole
from charges and atomic dipoles, the scalar output, and a backbone with scalar features
only read out through them."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import pytest
import torch
from fit_helpers import training_losses
from geometry_helpers import in_double, point_cloud_batch, random_rotation, transformed
from torch import nn

from oodmol.data.batches import PointCloudBatch
from oodmol.models.module import PropertyRegressor
from oodmol.models.output_modules import (
    AtomFeatureBackbone,
    ChargeDipoleOutput,
    EquivariantDipoleOutput,
    ScalarOutput,
    dipole_vector,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def test_two_opposite_charges_one_angstrom_apart_give_one():
    pos = torch.tensor([[0.3, -1.0, 2.0], [1.3, -1.0, 2.0]])
    segment = torch.zeros(2, dtype=torch.long)
    mu = dipole_vector(torch.tensor([1.0, -1.0]), pos, segment, 1)
    torch.testing.assert_close(mu, torch.tensor([[-1.0, 0.0, 0.0]]))
    # charges are made neutral: +3/+1 is +1/−1 after subtracting the mean charge 2
    torch.testing.assert_close(dipole_vector(torch.tensor([3.0, 1.0]), pos, segment, 1), mu)


def test_dipole_sums_per_molecule_and_adds_atomic_dipoles():
    pos = torch.tensor([[0.0, 0.0, 0.0], [0.0, 2.0, 0.0], [5.0, 5.0, 5.0]])
    segment = torch.tensor([0, 0, 1])
    atomic = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.5], [0.0, 0.0, 3.0]])
    mu = dipole_vector(torch.tensor([0.5, -0.5, 7.0]), pos, segment, 2, atomic)
    # molecule 0: −0.5 · (0, 2, 0) plus (1, 0, 0.5); molecule 1: one atom, charge 0
    torch.testing.assert_close(mu, torch.tensor([[1.0, -1.0, 0.5], [0.0, 0.0, 3.0]]))


def test_neutral_charges_make_the_dipole_independent_of_the_origin():
    g = torch.Generator().manual_seed(0)
    pos = torch.randn(7, 3, generator=g, dtype=torch.float64)
    charges = torch.randn(7, generator=g, dtype=torch.float64) + 1.0  # net charge ≠ 0
    segment = torch.tensor([0, 0, 0, 1, 1, 1, 1])
    shift = torch.tensor([10.0, -3.0, 4.0], dtype=torch.float64)
    torch.testing.assert_close(
        dipole_vector(charges, pos + shift, segment, 2), dipole_vector(charges, pos, segment, 2)
    )


class ElementsOnly(AtomFeatureBackbone):
    """A backbone with scalar features only: each atom's element embedding."""

    def __init__(self, output: nn.Module) -> None:
        super().__init__()
        self.embedding = nn.Embedding(100, 8)
        self.output = output

    def embed(self, batch: PointCloudBatch) -> tuple[torch.Tensor, None]:
        return self.embedding(batch.z), None


def test_scalar_output_gives_per_atom_vectors_for_the_shared_readout():
    torch.manual_seed(0)
    batch = point_cloud_batch()
    backbone = ElementsOnly(ScalarOutput(8))
    h, segment = backbone(batch)
    assert backbone.out_dim == 4 and h.shape == (len(batch.z), 4)
    assert segment is batch.molecule
    torch.testing.assert_close(
        h, nn.functional.silu(backbone.output.mlp[0](backbone.embedding(batch.z)))
    )


def test_charge_dipole_is_the_charges_moment_and_rotates_with_the_molecule():
    torch.manual_seed(0)
    backbone = ElementsOnly(ChargeDipoleOutput(8)).double()
    batch = in_double(point_cloud_batch())
    with torch.no_grad():
        mu = backbone.dipole_vector(batch)
        charges = backbone.output.charges(backbone.embedding(batch.z)).squeeze(-1)
        torch.testing.assert_close(
            mu, dipole_vector(charges, batch.pos, batch.molecule, len(batch))
        )
        torch.testing.assert_close(backbone(batch), mu.norm(dim=-1, keepdim=True))
        assert backbone.out_dim == 1 and mu.norm(dim=-1).max() > 1e-3
        rotation = random_rotation(2, reflect=True)
        moved = transformed(batch, rotation, torch.tensor([1.0, 20.0, -3.0], dtype=torch.float64))
        torch.testing.assert_close(backbone.dipole_vector(moved), mu @ rotation.T)


def test_equivariant_dipole_adds_the_atomic_dipoles_and_rotates_with_them():
    torch.manual_seed(0)
    output = EquivariantDipoleOutput(8).double()
    batch = in_double(point_cloud_batch())
    s = torch.randn(len(batch.z), 8, dtype=torch.float64)
    v = torch.randn(len(batch.z), 3, 8, dtype=torch.float64)
    with torch.no_grad():
        mu = output.vector(s, v, batch)
        charges, atomic = output.atom_terms(s, v)
        assert charges.shape == (len(batch.z),) and atomic.shape == (len(batch.z), 3)
        expected = dipole_vector(charges, batch.pos, batch.molecule, len(batch), atomic)
        torch.testing.assert_close(mu, expected)
        rotation = random_rotation(3, reflect=True)
        moved = replace(batch, pos=batch.pos @ rotation.T)
        rotated = torch.einsum("ab,nbf->naf", rotation, v)
        torch.testing.assert_close(output.vector(s, rotated, moved), mu @ rotation.T)
        torch.testing.assert_close(output(s, rotated, moved), mu.norm(dim=-1, keepdim=True))


@pytest.mark.parametrize("output", [ScalarOutput, ChargeDipoleOutput])
def test_a_backbone_without_vector_features_trains_through_either_output(output):
    torch.manual_seed(0)
    batch = point_cloud_batch()
    model = PropertyRegressor(
        ElementsOnly(output(8)), optimizer=partial(torch.optim.Adam, lr=3e-2), extensive=False
    )
    losses = training_losses(model, batch, steps=30)
    assert losses[-1] < 0.5 * losses[0]
