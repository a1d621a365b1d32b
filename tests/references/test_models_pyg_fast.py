"""Our forwards of SchNet, DimeNet++ and ViSNet against PyG's own forwards with identical
weights, in float64: outputs and every parameter's gradient, on batches with several
molecules, neighbour lists cut asymmetrically by a small `max_neighbors`, and a
single-atom molecule (no edges)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from geometry_helpers import point_cloud_batch
from pyg_helpers import give_pyg_dimenet_our_graph, summed_head
from torch_geometric.nn.models import dimenet, schnet
from torch_geometric.nn.models import visnet as pyg_visnet

from oodmol.models.backbones.dimenetpp import DimeNetPP, triplets
from oodmol.models.backbones.schnet import SchNet, undirected_pairs
from oodmol.models.backbones.visnet import ViSNet
from oodmol.models.neighbors import radius_graph

pytestmark = pytest.mark.usefixtures("one_thread")

SMILES = ["CC(=O)O", "[Na+]", "c1ccccc1O", "C/C=C/c1cc[nH+]cc1", "N#CC"]


def double_batch(max_neighbors: int, cutoff: float):
    batch = point_cloud_batch(SMILES)
    batch = replace(batch, pos=batch.pos.double(), y=batch.y.double())
    edges = radius_graph(batch.pos, batch.molecule, cutoff, max_neighbors)
    return batch, edges


def assert_same_outputs_and_gradients(ours, pyg, ours_out, pyg_out, renamed=None):
    """Equal outputs, and equal gradients of a random weighting of them for every
    parameter of `ours` (under its name in `pyg`, `renamed` mapping the differences)."""
    torch.testing.assert_close(ours_out, pyg_out, rtol=1e-5, atol=1e-5)
    weights = torch.randn(len(ours_out), dtype=ours_out.dtype)
    (ours_out * weights).sum().backward()
    (pyg_out * weights).sum().backward()
    theirs = dict(pyg.named_parameters())
    renamed = renamed or {}
    for name, parameter in ours.named_parameters():
        grad = theirs[renamed.get(name, name)].grad
        assert parameter.grad is not None and grad is not None, name
        torch.testing.assert_close(parameter.grad, grad, rtol=1e-5, atol=1e-7, msg=name)


def test_undirected_pairs_share_a_length_between_directions():
    batch, edges = double_batch(max_neighbors=3, cutoff=5.0)
    pair_of_edge, length = undirected_pairs(batch.pos, edges)
    source, target = edges
    present = {(int(j), int(i)) for j, i in edges.t()}
    one_way = [(i, j) not in present for j, i in present]
    assert any(one_way) and not all(one_way)  # the cap made some lists asymmetric
    torch.testing.assert_close(
        length[pair_of_edge], (batch.pos[source] - batch.pos[target]).norm(dim=-1)
    )
    assert len(length) == len(set(map(frozenset, edges.t().tolist())))


@pytest.mark.parametrize("max_neighbors", [32, 3])
def test_schnet_native_forward_is_pygs(max_neighbors):
    torch.manual_seed(0)
    batch, edges = double_batch(max_neighbors, cutoff=4.0)
    sodium = int((batch.z == 11).nonzero())
    assert edges.shape[1] > 0 and not bool((edges == sodium).any())  # a molecule, no edges
    ours = SchNet(16, 16, 3, 10, cutoff=4.0, max_neighbors=max_neighbors).double()
    pyg = schnet.SchNet(16, 16, 3, 10, cutoff=4.0, interaction_graph=ours.interaction_graph)
    weight = torch.randn(1, ours.out_dim, dtype=torch.float64)
    pyg = pyg.double()
    pyg.load_state_dict({**ours.state_dict(), "lin2.weight": weight, "lin2.bias": torch.zeros(1)})
    assert_same_outputs_and_gradients(
        ours,
        pyg,
        summed_head(*ours(batch), len(batch), weight),
        pyg(batch.z, batch.pos, batch.molecule).squeeze(-1),
    )


@pytest.fixture(scope="module")
def tiny_dimenetpp_pair():
    """Ours and PyG's DimeNet++ with the same weights in float64 (sympy derives the
    spherical basis in each constructor: ~1 s at 2 × 2 functions)."""
    torch.manual_seed(0)
    sizes = dict(hidden_channels=16, num_blocks=2, int_emb_size=8, basis_emb_size=4)
    sizes |= dict(out_emb_channels=16, num_spherical=2, num_radial=3, num_output_layers=2)
    ours = DimeNetPP(**sizes, cutoff=3.0, max_neighbors=4).double()
    pyg = dimenet.DimeNetPlusPlus(out_channels=1, **sizes, cutoff=3.0, max_num_neighbors=4)
    weight = torch.randn(1, ours.out_dim, dtype=torch.float64)
    finals = {f"output_blocks.{b}.lin.weight": w for b, w in enumerate(weight.split(16, dim=1))}
    pyg.double().load_state_dict({**ours.state_dict(), **finals})
    return ours, pyg, weight


def test_dimenetpp_native_forward_is_pygs(tiny_dimenetpp_pair, monkeypatch):
    """PyG's own forward, given our neighbour search and triplets (it needs torch-cluster
    and torch-sparse), with the cap of 4 neighbours making some lists asymmetric."""
    give_pyg_dimenet_our_graph(monkeypatch)
    ours, pyg, weight = tiny_dimenetpp_pair
    batch, edges = double_batch(max_neighbors=4, cutoff=3.0)
    assert len(triplets(edges, len(batch.z))[0]) > 0
    assert_same_outputs_and_gradients(
        ours,
        pyg,
        summed_head(*ours(batch), len(batch), weight),
        pyg(batch.z, batch.pos, batch.molecule).squeeze(-1),
    )


def test_visnet_native_forward_is_pygs():
    """PyG's ViSNet with our Distance (same edges, self-loops) and our weights; its
    second gated block's scalar row 0 carries the head's weight."""
    torch.manual_seed(0)
    batch, _ = double_batch(max_neighbors=4, cutoff=3.0)
    ours = ViSNet(
        num_heads=2, num_layers=3, hidden_channels=16, num_rbf=8, cutoff=3.0, max_neighbors=4
    ).double()
    pyg = pyg_visnet.ViSNet(
        lmax=2, vecnorm_type="max_min", num_heads=2, num_layers=3, hidden_channels=16,
        num_rbf=8, cutoff=3.0, max_num_neighbors=4,
    ).double()  # fmt: skip
    pyg.representation_model.distance = ours.representation.distance
    weight = torch.randn(1, ours.out_dim, dtype=torch.float64)
    state = pyg.state_dict()
    renamed = {
        f"representation.{k}": f"representation_model.{k}" for k in ours.representation.state_dict()
    }
    renamed |= {f"gated.{k}": f"output_model.output_network.0.{k}" for k in ours.gated.state_dict()}
    last = "output_model.output_network.1"
    renamed |= {
        "vec_proj.weight": f"{last}.vec1_proj.weight",
        "lin.weight": f"{last}.update_net.0.weight",
        "lin.bias": f"{last}.update_net.0.bias",
    }
    ours_state = ours.state_dict()
    state.update({theirs: ours_state[mine] for mine, theirs in renamed.items()})
    state[f"{last}.update_net.2.weight"][0] = weight[0]  # row 0: the scalar output
    state[f"{last}.update_net.2.bias"][0] = 0.0
    pyg.load_state_dict(state)
    assert_same_outputs_and_gradients(
        ours,
        pyg,
        summed_head(*ours(batch), len(batch), weight),
        pyg(batch.z, batch.pos, batch.molecule)[0].squeeze(-1),
        renamed,
    )
