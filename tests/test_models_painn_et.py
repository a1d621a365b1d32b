"""PaiNN and the Equivariant Transformer: symmetries, the dipole readout, training steps and
their Hydra configs.

Both models see the geometry only through distances, norms and dot products of polar
vectors, so their scalar outputs are O(3)-invariant: the invariance checks include
reflections. Their vector features, and the dipole vectors μ, are O(3)-equivariant:
v(Rr + t) = R v(r) for every orthogonal R, reflections included.
"""

from __future__ import annotations

import inspect
from functools import partial
from pathlib import Path

import pytest
import torch
from fit_helpers import training_losses
from geometry_helpers import (
    assert_invariant,
    in_double,
    point_cloud_batch,
    random_rotation,
    transformed,
)
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from oodmol.data.batches import PointCloudBatch
from oodmol.models.backbones.et import EquivariantTransformer, ExpNormalBasis
from oodmol.models.backbones.painn import PaiNN, SineBasis, cosine_cutoff
from oodmol.models.dipole import GatedEquivariantBlock, dipole_vector
from oodmol.models.module import PropertyRegressor

pytestmark = pytest.mark.usefixtures("one_thread")

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
TINY = {"hidden": 16, "layers": 2}
MODELS = {
    "painn": partial(PaiNN, **TINY),
    "et": partial(EquivariantTransformer, heads=4, **TINY),
}


@pytest.fixture(scope="module")
def batch() -> PointCloudBatch:
    return point_cloud_batch()


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


def test_radial_bases():
    r = torch.tensor([0.5, 2.0, 4.999, 5.0, 6.0])
    smooth = cosine_cutoff(torch.tensor([0.0, 2.5, 5.0]), 5.0)
    torch.testing.assert_close(smooth, torch.tensor([1.0, 0.5, 0.0]))
    sine = SineBasis(20, 5.0)(r)
    assert sine.shape == (5, 20)
    torch.testing.assert_close(sine[1, 2], torch.sin(torch.tensor(3 * torch.pi * 2.0 / 5.0)) / 2.0)
    expnorm = ExpNormalBasis(64, 5.0)(r)
    assert expnorm.shape == (5, 64) and torch.all(expnorm[3:] == 0)  # zero from the cutoff
    # narrow functions (β ≈ 1000) that tile the range under the cutoff's envelope
    envelope = cosine_cutoff(r[:3], 5.0)
    assert torch.all(expnorm[:3].max(dim=1).values > 0.9 * envelope) and expnorm.max() <= 1


@pytest.mark.parametrize("dipole", [False, True])
@pytest.mark.parametrize("name", list(MODELS))
def test_outputs_are_invariant_under_rotation_reflection_translation_permutation(
    batch, name, dipole
):
    torch.manual_seed(0)
    model = MODELS[name](dipole=dipole)
    out = model(batch)
    if dipole:
        assert model.out_dim == 1 and out.shape == (len(batch), 1)
    else:
        h, segment = out
        assert model.out_dim == 8 and h.shape == (len(batch.z), 8)
        assert segment is batch.molecule
    assert_invariant(model, batch, reflect=True)


@pytest.mark.parametrize("name", list(MODELS))
def test_vector_features_and_dipoles_rotate_with_the_molecule(batch, name):
    torch.manual_seed(0)
    model = MODELS[name](dipole=True).double().eval()
    batch = in_double(batch)
    with torch.no_grad():
        s, v = model.embed(batch)
        mu = model.dipole_vector(batch)
        assert v.abs().max() > 1e-3 and mu.norm(dim=1).max() > 1e-3  # not trivially zero
        for seed, reflect in [(0, False), (1, True)]:
            rotation = random_rotation(seed, reflect)
            shift = torch.tensor([3.0, -2.0, 7.0], dtype=torch.float64)
            moved = transformed(batch, rotation, shift)
            s_moved, v_moved = model.embed(moved)
            torch.testing.assert_close(s_moved, s)
            torch.testing.assert_close(v_moved, torch.einsum("ab,nbf->naf", rotation, v))
            mu_moved = model.dipole_vector(moved)
            torch.testing.assert_close(mu_moved, mu @ rotation.T)
            torch.testing.assert_close(model(moved), mu.norm(dim=1, keepdim=True))
        # translation alone leaves μ unchanged (the charges are neutral)
        shifted = transformed(batch, torch.eye(3, dtype=torch.float64), 50 * shift)
        torch.testing.assert_close(model.dipole_vector(shifted), mu)


def test_dipole_readout_of_a_symmetric_molecule_is_zero():
    """Methane's ETKDG + MMFF geometry is tetrahedral: any per-element charges and
    atomic dipoles built from its (symmetric) features cancel."""
    methane = in_double(point_cloud_batch(["C"]))
    torch.manual_seed(0)
    for model in (MODELS["painn"](dipole=True), MODELS["et"](dipole=True)):
        with torch.no_grad():
            assert model.double()(methane).item() < 1e-4


@pytest.mark.parametrize("dipole", [False, True])
@pytest.mark.parametrize("name", list(MODELS))
def test_training_steps_lower_the_loss(batch, name, dipole):
    torch.manual_seed(0)
    model = PropertyRegressor(
        MODELS[name](dipole=dipole),
        optimizer=partial(torch.optim.Adam, lr=1e-2),
        extensive=True,
    )
    losses = training_losses(model, batch, steps=25, check_grads=False)
    assert losses[-1] < 0.5 * losses[0]


@pytest.mark.parametrize(
    "config,target,dipole",
    [
        ("painn", PaiNN, False),
        ("painn_dipole", PaiNN, True),
        ("et", EquivariantTransformer, False),
        ("et_dipole", EquivariantTransformer, True),
    ],
)
def test_configs_compose_and_instantiate(batch, config, target, dipole):
    tiny = [f"model.module.backbone.{k}={v}" for k, v in TINY.items()]
    if target is EquivariantTransformer:
        tiny.append("model.module.backbone.heads=4")
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = compose("train", overrides=[f"model={config}", "task=qm9_mu", *tiny])
    assert cfg.model.name == config and cfg.model.dipole is dipole
    assert cfg.model.featurizer._target_.endswith("graph3d.Graph3D")
    assert cfg.model.features._target_.endswith("PointCloudFeatures")
    module = instantiate(cfg.model.module)
    assert isinstance(module.backbone, target)
    assert (module.backbone.dipole is not None) is dipole
    assert module.backbone.out_dim == (1 if dipole else 8)
    assert module(batch).shape == (len(batch),)


@pytest.mark.parametrize("config,target", [("painn", PaiNN), ("et", EquivariantTransformer)])
def test_constructor_defaults_are_the_published_sizes_in_the_configs(config, target):
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        backbone = compose("train", overrides=[f"model={config}"]).model.module.backbone
    defaults = inspect.signature(target).parameters
    for key, value in backbone.items():
        if key not in ("_target_", "dipole"):
            assert defaults[key].default == value, key
