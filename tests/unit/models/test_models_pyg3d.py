"""SchNet, DimeNet++ and ViSNet from PyTorch Geometric: pure-torch triplets, each wrapper
against PyG's own forward (with our neighbour search and its last Linear as the head),
symmetry, training steps, the warm-up + plateau schedule, and their Hydra configs."""

from __future__ import annotations

import copy
from dataclasses import replace
from functools import partial
from types import SimpleNamespace

import pytest
import torch
from fit_helpers import training_losses
from geometry_helpers import assert_invariant, molecule_output, point_cloud_batch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from paths import REPO
from pyg_helpers import (
    TINY_DIMENETPP,
    give_pyg_dimenet_our_graph,
    summed_head,
    tiny_schnet,
    tiny_visnet,
)
from torch.optim.lr_scheduler import LambdaLR, ReduceLROnPlateau
from torch_geometric.nn.models import dimenet, schnet
from torch_geometric.nn.models import visnet as pyg_visnet

from oodmol.models.backbones.dimenetpp import DimeNetPP, triplets
from oodmol.models.backbones.schnet import SchNet
from oodmol.models.backbones.visnet import Distance, ViSNet
from oodmol.models.module import PropertyRegressor
from oodmol.models.neighbors import radius_graph
from oodmol.models.schedules import build_scheduler, warmup_plateau

pytestmark = pytest.mark.usefixtures("one_thread")

ROOT = REPO


@pytest.fixture(scope="module")
def tiny_dimenetpp() -> DimeNetPP:
    """Built once: the spherical basis is derived with sympy in the constructor (~1 s for
    2 × 2 functions, ~40 s for the published 7 × 6)."""
    torch.manual_seed(0)
    return DimeNetPP(**TINY_DIMENETPP)


def reference_triplets(edge_index: torch.Tensor) -> list[tuple[int, int]]:
    """(k → j, j → i) edge pairs with k ≠ i, edge by edge: DimeNet's definition, in PyG's
    order (edges j → i in turn, then the edges into j by source)."""
    edges = edge_index.t().tolist()
    out = []
    for ji, (j, i) in enumerate(edges):
        into_j = [kj for kj, (k, t) in enumerate(edges) if t == j and k != i]
        out += [(kj, ji) for kj in sorted(into_j, key=lambda e: edges[e][0])]
    return out


@pytest.mark.parametrize("shuffle", [False, True])
def test_triplets_match_the_definition(shuffle):
    torch.manual_seed(0)
    batch = point_cloud_batch(["CC(=O)O", "C", "N#CC"])
    edge_index = radius_graph(batch.pos, batch.molecule, cutoff=2.0)
    if shuffle:  # no reliance on edges sorted by target
        edge_index = edge_index[:, torch.randperm(edge_index.shape[1])]
    idx_kj, idx_ji, idx_k, idx_i = triplets(edge_index, len(batch.z))
    assert list(zip(idx_kj.tolist(), idx_ji.tolist(), strict=True)) == reference_triplets(
        edge_index
    )
    torch.testing.assert_close(idx_k, edge_index[0, idx_kj])
    torch.testing.assert_close(idx_i, edge_index[1, idx_ji])
    assert len(idx_kj) > 0 and bool((edge_index[1, idx_kj] == edge_index[0, idx_ji]).all())


def test_schnet_is_pygs_with_its_last_linear_as_the_head():
    torch.manual_seed(0)
    batch = point_cloud_batch()
    ours = tiny_schnet()
    pyg = schnet.SchNet(16, 16, 2, 10, interaction_graph=ours.interaction_graph)
    weight = torch.randn(1, ours.out_dim)
    pyg.load_state_dict({**ours.state_dict(), "lin2.weight": weight, "lin2.bias": torch.zeros(1)})
    with torch.no_grad():
        expected = pyg(batch.z, batch.pos, batch.molecule).squeeze(-1)
        torch.testing.assert_close(summed_head(*ours(batch), len(batch), weight), expected)


def test_dimenetpp_is_pygs_with_its_last_linears_as_the_head(tiny_dimenetpp, monkeypatch):
    """PyG's own forward, given our neighbour search and triplets (it needs torch-cluster
    and torch-sparse), and the output blocks' final Linears taken from the head."""
    give_pyg_dimenet_our_graph(monkeypatch)
    torch.manual_seed(0)
    batch = point_cloud_batch()
    ours = tiny_dimenetpp
    pyg = dimenet.DimeNetPlusPlus(16, 1, 2, 8, 4, 16, 2, 2, num_output_layers=1)
    weight = torch.randn(1, ours.out_dim)
    finals = {f"output_blocks.{b}.lin.weight": w for b, w in enumerate(weight.split(16, dim=1))}
    pyg.load_state_dict({**ours.state_dict(), **finals})
    with torch.no_grad():
        expected = pyg(batch.z, batch.pos, batch.molecule).squeeze(-1)
        # float32: our forward sums in another order (the float64 check to 1e-5 of
        # outputs and gradients is in test_models_pyg_fast.py)
        torch.testing.assert_close(
            summed_head(*ours(batch), len(batch), weight), expected, rtol=1e-5, atol=1e-5
        )


def test_visnet_is_pygs_with_its_last_linear_as_the_head():
    torch.manual_seed(0)
    batch = point_cloud_batch()
    ours = tiny_visnet()
    pyg = pyg_visnet.ViSNet(
        lmax=2, vecnorm_type="max_min", num_heads=2, num_layers=2, hidden_channels=16, num_rbf=8
    )
    pyg.representation_model.distance = Distance(5.0, 32)
    weight = torch.randn(1, ours.out_dim)
    state = pyg.state_dict()
    state.update(
        {f"representation_model.{k}": v for k, v in ours.representation.state_dict().items()}
    )
    state.update(
        {f"output_model.output_network.0.{k}": v for k, v in ours.gated.state_dict().items()}
    )
    last = "output_model.output_network.1"
    state[f"{last}.vec1_proj.weight"] = ours.vec_proj.weight
    state[f"{last}.update_net.0.weight"] = ours.lin.weight
    state[f"{last}.update_net.0.bias"] = ours.lin.bias
    state[f"{last}.update_net.2.weight"][0] = weight[0]  # row 0: the scalar output
    state[f"{last}.update_net.2.bias"][0] = 0.0
    pyg.load_state_dict(state)
    with torch.no_grad():
        expected = pyg(batch.z, batch.pos, batch.molecule)[0].squeeze(-1)
        torch.testing.assert_close(summed_head(*ours(batch), len(batch), weight), expected)


def test_visnet_distance_adds_self_loops_to_the_radius_graph():
    batch = point_cloud_batch()
    pos, n = batch.pos, len(batch.z)
    edge_index, weight, vec = Distance(cutoff=3.0, max_num_neighbors=32)(pos, batch.molecule)
    pairs = radius_graph(pos, batch.molecule, 3.0, 32)
    torch.testing.assert_close(edge_index[:, : pairs.shape[1]], pairs)
    torch.testing.assert_close(edge_index[:, pairs.shape[1] :], torch.arange(n).expand(2, n))
    torch.testing.assert_close(vec, pos[edge_index[0]] - pos[edge_index[1]])
    torch.testing.assert_close(weight, vec.norm(dim=-1))


@pytest.mark.parametrize("name", ["schnet", "dimenetpp", "visnet"])
def test_outputs_are_invariant_to_rotation_reflection_translation_permutation(name, tiny_dimenetpp):
    """All three hold reflections too: SchNet reads distances, DimeNet++ distances and
    angles (|a × b| enters only through its norm), ViSNet's scalars take dot products
    and norms of spherical-harmonic vectors (l = 1 and 2), on which O(3) acts
    orthogonally, and no cross product. A stretched molecule does change the output."""
    torch.manual_seed(0)
    model = {"schnet": tiny_schnet, "visnet": tiny_visnet}.get(
        name, lambda: copy.deepcopy(tiny_dimenetpp)
    )()
    batch = point_cloud_batch()
    assert_invariant(model, batch, reflect=True)  # casts the model to float64
    doubled = replace(batch, pos=batch.pos.double())
    with torch.no_grad():
        stretched = replace(doubled, pos=doubled.pos * 1.1)
        assert not torch.allclose(
            molecule_output(model, stretched), molecule_output(model, doubled), atol=1e-4
        )


@pytest.mark.parametrize(
    "name,extensive", [("schnet", True), ("dimenetpp", False), ("visnet", True)]
)
def test_training_steps_lower_the_loss(name, extensive, tiny_dimenetpp):
    torch.manual_seed(0)
    backbone = {"schnet": tiny_schnet, "visnet": tiny_visnet}.get(
        name, lambda: copy.deepcopy(tiny_dimenetpp)
    )()
    batch = point_cloud_batch()
    model = PropertyRegressor(
        backbone, optimizer=partial(torch.optim.Adam, lr=1e-2), extensive=extensive
    )
    losses = training_losses(model, batch, steps=25)
    assert losses[-1] < 0.5 * losses[0]


def test_reset_parameters_still_works_without_the_moved_linears(tiny_dimenetpp):
    for model in (tiny_schnet(), copy.deepcopy(tiny_dimenetpp), tiny_visnet()):
        before = copy.deepcopy(model.state_dict())
        model.reset_parameters()
        after = model.state_dict()
        assert before.keys() == after.keys()
        assert any(not torch.equal(before[k], after[k]) for k in before)


def test_warmup_plateau_rises_linearly_then_follows_the_validation_loss():
    trainer = SimpleNamespace(global_step=0)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = build_scheduler(
        partial(warmup_plateau, warmup_steps=4, factor=0.5, patience=0, min_lr=0.2),
        optimizer,
        trainer,
    )
    lrs = []
    for step in range(6):
        trainer.global_step = step
        optimizer.step()
        lrs.append(optimizer.param_groups[0]["lr"])
    assert lrs == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.0, 1.0])
    for loss, lr in [(1.0, 1.0), (1.0, 0.5), (0.5, 0.5), (0.7, 0.25), (0.7, 0.2)]:
        scheduler.step(loss)
        assert optimizer.param_groups[0]["lr"] == pytest.approx(lr)


def fake_trainer() -> SimpleNamespace:
    return SimpleNamespace(
        estimated_stepping_batches=100,
        num_training_batches=10,
        accumulate_grad_batches=1,
        max_epochs=10,
        global_step=0,
    )


@pytest.mark.parametrize(
    "name,backbone,batch_size,schedule,tiny",
    [
        (
            "schnet",
            SchNet,
            100,
            ReduceLROnPlateau,
            ["hidden_channels=16", "num_filters=16", "num_interactions=2"],
        ),
        (
            "dimenetpp",
            DimeNetPP,
            32,
            LambdaLR,
            ["hidden_channels=16", "out_emb_channels=16", "num_spherical=2", "num_radial=2"],
        ),
        (
            "visnet",
            ViSNet,
            32,
            ReduceLROnPlateau,
            ["hidden_channels=16", "num_layers=2", "num_rbf=8"],
        ),
    ],
)
def test_config_builds_the_model(name, backbone, batch_size, schedule, tiny):
    overrides = [f"model.module.backbone.{o}" for o in tiny]
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("train", overrides=[f"model={name}", "task=qm9_homo", *overrides])
    assert cfg.model.name == name and cfg.model.max_epochs == 300
    assert cfg.model.batch_size == batch_size
    assert cfg.model.featurizer._target_.endswith("Graph3D")
    module = instantiate(cfg.model.module)
    assert isinstance(module, PropertyRegressor) and type(module.backbone) is backbone
    assert not module.readout.extensive  # HOMO is intensive: mean over atoms
    optimizer = module.optimizer_factory(module.parameters())
    scheduler = build_scheduler(module.scheduler_factory, optimizer, fake_trainer())
    assert type(scheduler) is schedule
    batch = point_cloud_batch()
    assert module(batch).shape == (len(batch),)
