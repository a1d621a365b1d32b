"""PaiNN and the Equivariant Transformer: symmetries, the dipole readout, training steps and
their Hydra configs. Their building blocks and output modules have their own tests
(`test_blocks.py`, `test_output_modules.py`), and `test_painn_et_equivalence.py` holds
them to their code from before those blocks.

Both models see the geometry only through distances, norms and dot products of polar
vectors, so their scalar outputs are O(3)-invariant: the invariance checks include
reflections. Their vector features, and the dipole vectors μ, are O(3)-equivariant:
v(Rr + t) = R v(r) for every orthogonal R, reflections included.
"""

from __future__ import annotations

import inspect
from functools import partial

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
from paths import REPO

from oodmol.data.batches import PointCloudBatch
from oodmol.models.backbones.et import EquivariantTransformer
from oodmol.models.backbones.painn import PaiNN
from oodmol.models.module import PropertyRegressor
from oodmol.models.output_modules import EquivariantDipoleOutput, ScalarOutput

pytestmark = pytest.mark.usefixtures("one_thread")

CONFIGS = REPO / "configs"
TINY = {"hidden": 16, "layers": 2}
MODELS = {
    "painn": partial(PaiNN, **TINY),
    "et": partial(EquivariantTransformer, heads=4, **TINY),
}


@pytest.fixture(scope="module")
def batch() -> PointCloudBatch:
    return point_cloud_batch()


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
    assert isinstance(module.backbone.output, EquivariantDipoleOutput if dipole else ScalarOutput)
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
