"""GotenNet: symmetries of its predictions and of its steerable features, training steps,
its Hydra config and its readout. `test_gotennet_equivalence.py` holds it to the
authors' `gotennet` package on identical weights (in `make gotennet-env`).

Its scalars see the geometry only through distances and inner products of same-degree
spherical harmonics, so predictions are O(3)-invariant (reflections included), translation
and permutation invariant; its steerable features X are irreps 1x1o+1x2e in e3nn's basis:
X(Rr + t) = D(R) X(r) with D = `Irreps("1x1o+1x2e").D_from_matrix(R)`, for rotations and
reflections (the l = 1 part changes sign under −I, the l = 2 part does not).
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
    permuted,
    point_cloud_batch,
    random_rotation,
    transformed,
)
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from paths import REPO

from oodmol.data.batches import PointCloudBatch
from oodmol.models.backbones.gotennet import GotenNet
from oodmol.models.module import PropertyRegressor
from oodmol.models.output_modules import ScalarOutput

pytestmark = pytest.mark.usefixtures("one_thread")

CONFIGS = REPO / "configs"
TINY = {"hidden": 16, "layers": 3, "heads": 4, "num_rbf": 8, "output_hidden": 8}
tiny_gotennet = partial(GotenNet, **TINY)


def wigner_D(irreps: o3.Irreps, rotation: torch.Tensor) -> torch.Tensor:
    """`irreps.D_from_matrix(rotation)` accurate to float64: e3nn builds some of its
    constants in the default dtype, which costs it ~1e-7 in float32."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        return irreps.D_from_matrix(rotation)
    finally:
        torch.set_default_dtype(default)


@pytest.fixture(scope="module")
def batch() -> PointCloudBatch:
    return point_cloud_batch()


def test_predictions_are_invariant_under_rotation_reflection_translation_permutation(batch):
    torch.manual_seed(0)
    model = tiny_gotennet()
    h, segment = model(batch)
    assert model.out_dim == 8 and h.shape == (len(batch.z), 8)
    assert segment is batch.molecule
    assert_invariant(model, batch, reflect=False)
    assert_invariant(model, batch, reflect=True)


@pytest.mark.parametrize("reflect", [False, True])
def test_steerable_features_transform_with_e3nn_wigner_matrices(batch, reflect):
    torch.manual_seed(0)
    model = tiny_gotennet().double().eval()
    batch = in_double(batch)
    irreps = o3.Irreps("1x1o+1x2e")
    with torch.no_grad():
        h, X = model.embed(batch)
        assert X.shape == (len(batch.z), irreps.dim, 16)
        for degree, part in ((1, X[:, :3]), (2, X[:, 3:])):  # neither is trivially zero
            assert part.abs().max() > 1e-3, degree
        for seed in range(2):
            rotation = random_rotation(seed, reflect)
            D = wigner_D(irreps, rotation)
            moved = transformed(batch, rotation, torch.tensor([3.0, -2.0, 7.0]).double())
            h_moved, X_moved = model.embed(moved)
            torch.testing.assert_close(h_moved, h)
            torch.testing.assert_close(X_moved, torch.einsum("ab,nbf->naf", D, X))


def test_inversion_flips_only_the_odd_degree(batch):
    """Under r → −r the l = 1 features change sign and the l = 2 features stay: the
    parities e3nn's 1o and 2e name."""
    torch.manual_seed(0)
    model = tiny_gotennet().double().eval()
    batch = in_double(batch)
    with torch.no_grad():
        _, X = model.embed(batch)
        _, X_inverted = model.embed(transformed(batch, -torch.eye(3).double(), torch.zeros(3)))
    torch.testing.assert_close(X_inverted[:, :3], -X[:, :3])
    torch.testing.assert_close(X_inverted[:, 3:], X[:, 3:])


def test_atom_features_follow_a_permutation_of_the_atoms(batch):
    torch.manual_seed(0)
    model = tiny_gotennet().double().eval()
    batch = in_double(batch)
    shuffled, perm = permuted(batch, seed=3)
    with torch.no_grad():
        h, X = model.embed(batch)
        h_shuffled, X_shuffled = model.embed(shuffled)
    torch.testing.assert_close(h_shuffled, h[perm])
    torch.testing.assert_close(X_shuffled, X[perm])


def test_attention_dropout_acts_in_training_only(batch):
    torch.manual_seed(0)
    model = tiny_gotennet(attn_dropout=0.5)
    with torch.no_grad():
        model.eval()
        assert torch.equal(model(batch)[0], model(batch)[0])
        model.train()
        assert not torch.equal(model(batch)[0], model(batch)[0])


def test_training_steps_lower_the_loss(batch):
    torch.manual_seed(0)
    model = PropertyRegressor(
        tiny_gotennet(attn_dropout=0.0),
        optimizer=partial(torch.optim.Adam, lr=1e-2),
        extensive=True,
    )
    losses = training_losses(model, batch, steps=25)
    assert losses[-1] < 0.5 * losses[0]


@pytest.mark.parametrize(
    "kwargs,message", [({"heads": 3}, "multiple of heads"), ({"lmax": 0}, "lmax")]
)
def test_bad_sizes_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        tiny_gotennet(**kwargs)


@pytest.mark.parametrize("task,extensive", [("qm9_homo", False), ("csd10k_hof", True)])
def test_config_composes_with_the_task_readout(batch, task, extensive):
    tiny = [f"model.module.backbone.{k}={v}" for k, v in TINY.items()]
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = compose("train", overrides=["model=gotennet", f"task={task}", *tiny])
    assert cfg.model.featurizer._target_.endswith("graph3d.Graph3D")
    assert cfg.model.features._target_.endswith("PointCloudFeatures")
    module = instantiate(cfg.model.module)
    assert isinstance(module.backbone, GotenNet)
    assert isinstance(module.backbone.output, ScalarOutput)
    assert module.readout.extensive is extensive  # sum for extensive, mean for intensive
    assert module.gradient_clip_norm == 5.0
    assert module(batch).shape == (len(batch),)


def test_constructor_defaults_are_the_published_sizes_in_the_config():
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        backbone = compose("train", overrides=["model=gotennet"]).model.module.backbone
    defaults = inspect.signature(GotenNet).parameters
    for key, value in backbone.items():
        if key != "_target_":
            assert defaults[key].default == value, key
    model = GotenNet()
    n_params = sum(p.numel() for p in model.parameters())
    assert 7.6e6 < n_params < 7.8e6  # upstream's 7.7 M with the 256-wide output MLP
