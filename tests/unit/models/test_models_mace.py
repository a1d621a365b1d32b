"""MACE: symmetries, unseen elements, training steps and its Hydra config. Its equality
with mace-torch 0.3.16 on identical weights is `test_mace_equivalence.py` (side
environment, `make test-mace-reference`).

MACE's energies are O(3)-invariant (its spherical harmonics carry their parity), and the
features of its first layer (num_channels x 0e + 1o + 2e) transform with e3nn's Wigner D
matrices of the rotation, reflections included: h(Rr + t) = D(R) h(r).
"""

from __future__ import annotations

import inspect
from functools import partial

import pytest
import torch
from e3nn import o3
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
from oodmol.models.backbones.mace import MACE
from oodmol.models.module import PropertyRegressor

pytestmark = pytest.mark.usefixtures("one_thread")

CONFIGS = REPO / "configs"
ELEMENTS = [1, 6, 7, 8]  # those of geometry_helpers.SMILES
TINY = {"num_channels": 4, "max_L": 2, "radial_mlp": [8], "mlp_irreps": "4x0e"}
tiny_mace = partial(MACE, ELEMENTS, 3.0, **TINY)


@pytest.fixture(scope="module")
def batch() -> PointCloudBatch:
    return point_cloud_batch()


def test_energies_are_invariant_under_rotation_reflection_translation_permutation(batch):
    torch.manual_seed(0)
    model = tiny_mace()
    energies, segment = model(batch)
    assert model.out_dim == 1 and energies.shape == (len(batch.z), 1)
    assert segment is batch.molecule
    assert_invariant(model, batch, reflect=True, atol=1e-9)


@pytest.mark.parametrize("reflect", [False, True])
def test_steerable_features_transform_with_wigner_d_matrices(batch, reflect):
    torch.manual_seed(0)
    model = tiny_mace().double().eval()
    batch = in_double(batch)
    irreps = model.hidden_irreps[0]
    assert irreps == o3.Irreps("4x0e+4x1o+4x2e")
    rotation = random_rotation(3, reflect)
    with torch.no_grad():
        features = model.node_features(batch)[0]
        moved = model.node_features(transformed(batch, rotation, torch.tensor([1.0, -4.0, 2.0])))[0]
    vectors = features[:, irreps.slices()[1]]
    assert vectors.abs().max() > 1e-3  # the l = 1, 2 features are not trivially zero
    d = irreps.D_from_matrix(rotation)
    # e3nn's constants are built in float32, so equivariance holds to ~1e-7
    torch.testing.assert_close(moved, features @ d.T, atol=1e-6, rtol=0)
    if reflect:  # the odd (1o) part changes sign beyond the rotation: a real check of parity
        proper = irreps.D_from_matrix(-rotation)
        assert not torch.allclose(moved, features @ proper.T, atol=1e-6)


def test_an_element_outside_the_training_set_gets_a_zero_encoding(batch):
    torch.manual_seed(0)
    model = MACE([1, 6, 8], 3.0, **TINY)  # no nitrogen
    attrs = model.one_hot(torch.tensor([1, 7, 8]), torch.float64)
    assert attrs.tolist() == [[1, 0, 0], [0, 0, 0], [0, 0, 1]]
    energies, _ = model(batch)  # the batch has N atoms
    assert torch.isfinite(energies).all()


def test_bad_constructor_arguments_are_refused():
    with pytest.raises(ValueError, match="atomic_numbers is empty"):
        MACE([], 3.0)
    with pytest.raises(ValueError, match="must lie in"):
        MACE([1, 200], 3.0)
    with pytest.raises(ValueError, match="num_interactions"):
        MACE([1], 3.0, num_interactions=0)


def test_training_steps_lower_the_loss(batch):
    torch.manual_seed(0)
    model = PropertyRegressor(
        tiny_mace(), optimizer=partial(torch.optim.Adam, lr=1e-2), extensive=True
    )
    losses = training_losses(model, batch, steps=25)
    assert losses[-1] < 0.5 * losses[0]


def test_one_interaction_reads_out_scalars_only(batch):
    torch.manual_seed(0)
    model = MACE(ELEMENTS, 3.0, num_interactions=1, **TINY)
    assert [str(i) for i in model.hidden_irreps] == ["4x0e"]
    assert model(batch)[0].shape == (len(batch.z), 1)


def test_config_composes_and_instantiates_with_its_statistics(batch):
    tiny = [f"model.module.backbone.{k}={v}" for k, v in TINY.items()]
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = compose("train", overrides=["model=mace", "task=qm9_homo", *tiny])
        boom = compose("train", overrides=["model=mace", "task=qm9_homo", "protocol=boom"])
    assert cfg.model.precision == "64-true" and cfg.model.featurizer._target_.endswith("Graph3D")
    assert set(cfg.model.statistics) == {
        "backbone.atomic_numbers",
        "backbone.avg_num_neighbors",
        "atom_reference",
    }
    # the task's readout by default (HOMO is intensive), BOOM's sum under protocol=boom
    assert cfg.model.module.extensive is False and cfg.model.module.per_atom_loss is False
    assert boom.model.module.extensive is True and boom.model.module.per_atom_loss is True
    reference = {"offsets": {"1": -0.5, "6": 0.25}, "residual_mean": 0.0, "residual_std": 1.0}
    module = instantiate(
        cfg.model.module,
        backbone={"atomic_numbers": ELEMENTS, "avg_num_neighbors": 5.0},
        atom_reference=reference,
    )
    assert isinstance(module.backbone, MACE)
    assert module.double()(in_double(batch)).shape == (len(batch),)


def test_constructor_defaults_are_boom_settings_in_the_config():
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        backbone = compose("train", overrides=["model=mace"]).model.module.backbone
    defaults = inspect.signature(MACE).parameters
    for key, value in backbone.items():
        if key != "_target_":
            expected = tuple(value) if key == "radial_mlp" else value
            assert defaults[key].default == expected, key


def test_published_size_has_booms_parameter_count():
    """BOOM's MACE on QM9 has 3.94 M parameters (../shared/MODELS.md); the exact count is
    mace-torch's, checked in test_mace_equivalence.py."""
    model = MACE([1, 6, 7, 8, 9], 10.0)  # QM9's elements
    assert round(sum(p.numel() for p in model.parameters()) / 1e6, 2) == 3.94
