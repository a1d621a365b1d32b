"""The neighbour search: one graph, nearest first, in a defined order, from the exact
pure-torch search and from torch-cluster alike.

The pure-torch path is checked against the definition written atom by atom; the
torch-cluster path against the pure-torch one, with a stand-in that behaves as
torch-cluster does (first neighbours found, its own order and rounding) everywhere, and
with torch-cluster itself where it is installed."""

from __future__ import annotations

import sys
from itertools import product
from types import SimpleNamespace

import pytest
import torch
from geometry_helpers import point_cloud_batch

from oodmol.models.neighbors import HAS_TORCH_CLUSTER, radius_graph

pytestmark = pytest.mark.usefixtures("one_thread")

NO_TORCH_CLUSTER = "torch-cluster is not installed: its path is checked with a stand-in only"


def reference_graph(
    pos: torch.Tensor, batch: torch.Tensor, cutoff: float, max_neighbors: int | None, loop: bool
) -> list[tuple[int, int]]:
    """The definition, atom by atom in Python floats: for each target i in turn, its loop,
    then the (at most `max_neighbors`) nearest other atoms of its molecule within the
    cutoff, ties by index. With float64 positions the squared distances are the search's
    own, bit for bit."""
    p, b = pos.tolist(), batch.tolist()
    edges = []
    for i in range(len(p)):
        found = []
        for j in range(len(p)):
            dx, dy, dz = (p[i][k] - p[j][k] for k in range(3))
            squared = dx * dx + dy * dy + dz * dz
            if j != i and b[j] == b[i] and squared < cutoff * cutoff:
                found.append((squared, j))
        edges += [(i, i)] * loop + [(j, i) for _, j in sorted(found)[:max_neighbors]]
    return edges


def random_clouds(seed: int, sizes: tuple[int, ...] = (5, 0, 1, 17, 2, 30)):
    """Molecules of `sizes` atoms (0: a molecule without atoms) at about the density of
    organic molecules, float64; returns positions and the sorted molecule index."""
    g = torch.Generator().manual_seed(seed)
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    side = 1.6 * torch.tensor(sizes, dtype=torch.float64).clamp(min=1) ** (1 / 3)
    pos = torch.rand(len(batch), 3, generator=g, dtype=torch.float64) * side[batch, None]
    return pos, batch


def edge_list(edges: torch.Tensor) -> list[tuple[int, int]]:
    assert edges.dtype == torch.int64 and edges.shape[0] == 2
    return list(map(tuple, edges.t().tolist()))


@pytest.mark.parametrize(
    ("cutoff", "max_neighbors", "loop"),
    list(product([1.2, 3.0, 50.0], [3, 64, None], [False, True])),
)
def test_molecules_match_the_definition_atom_by_atom(cutoff, max_neighbors, loop):
    batch = point_cloud_batch()
    pos = batch.pos.double()
    edges = radius_graph(pos, batch.molecule, cutoff, max_neighbors, loop, use_torch_cluster=False)
    assert edge_list(edges) == reference_graph(pos, batch.molecule, cutoff, max_neighbors, loop)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(("cutoff", "max_neighbors"), [(1.5, 1), (3.0, 4), (3.0, None)])
def test_random_point_clouds_match_the_definition(seed, cutoff, max_neighbors):
    pos, batch = random_clouds(seed)
    for loop in (False, True):
        edges = radius_graph(pos, batch, cutoff, max_neighbors, loop, use_torch_cluster=False)
        assert edge_list(edges) == reference_graph(pos, batch, cutoff, max_neighbors, loop)


def test_the_cap_keeps_the_nearest_not_the_first_atoms():
    # atom 4 sees atoms 0-3 at 4, 3, 2 and 1 Å: the lowest indices are the farthest
    pos = torch.tensor([[4.0, 0, 0], [3.0, 0, 0], [2.0, 0, 0], [1.0, 0, 0], [0.0, 0, 0]])
    batch = torch.zeros(5, dtype=torch.long)
    edges = radius_graph(pos, batch, 5.0, max_neighbors=2, use_torch_cluster=False)
    into_4 = edges[0, edges[1] == 4].tolist()
    assert into_4 == [3, 2]


def test_ties_are_broken_by_atom_index():
    # atoms 1-4 all exactly 1 Å from atom 0 (squares of 0 and ±1 are exact)
    pos = torch.tensor([[0.0, 0, 0], [0, 0, -1], [1, 0, 0], [0, -1, 0], [0, 1, 0]])
    batch = torch.zeros(5, dtype=torch.long)
    edges = radius_graph(pos, batch, 1.5, max_neighbors=3, use_torch_cluster=False)
    assert edges[0, edges[1] == 0].tolist() == [1, 2, 3]


def test_edges_are_ordered_by_target_then_distance_then_source():
    pos, batch = random_clouds(seed=7)
    source, target = radius_graph(pos, batch, 4.0, None, use_torch_cluster=False)
    squared = (pos[source] - pos[target]).pow(2).sum(-1)
    keys = list(zip(target.tolist(), squared.tolist(), source.tolist(), strict=True))
    assert keys == sorted(keys) and len(set(keys)) == len(keys)


def test_self_loops_come_first_and_do_not_take_a_neighbours_place():
    pos, batch = random_clouds(seed=3)
    plain = radius_graph(pos, batch, 3.0, 2, use_torch_cluster=False)
    looped = radius_graph(pos, batch, 3.0, 2, loop=True, use_torch_cluster=False)
    assert not (plain[0] == plain[1]).any()
    is_loop = looped[0] == looped[1]
    assert is_loop.sum() == len(pos)
    assert torch.equal(looped[:, ~is_loop], plain)  # the same neighbours, the same order
    # each target's edges start with its loop
    first_of_target = torch.ones_like(is_loop)
    first_of_target[1:] = looped[1, 1:] != looped[1, :-1]
    assert torch.equal(first_of_target, is_loop)


def test_empty_batches_single_atoms_and_molecules_without_atoms():
    empty = torch.empty(0, 3)
    none = torch.empty(0, dtype=torch.long)
    for loop in (False, True):
        edges = radius_graph(empty, none, 5.0, loop=loop, use_torch_cluster=False)
        assert edges.shape == (2, 0) and edges.dtype == torch.int64
    # two lone atoms next to each other, in molecules 0 and 2 (molecule 1 has no atoms)
    pos, batch = torch.tensor([[0.0, 0, 0], [0.5, 0, 0]]), torch.tensor([0, 2])
    assert radius_graph(pos, batch, 5.0, use_torch_cluster=False).shape == (2, 0)
    looped = radius_graph(pos, batch, 5.0, loop=True, use_torch_cluster=False)
    assert edge_list(looped) == [(0, 0), (1, 1)]


def first_found_radius_graph(
    pos: torch.Tensor, r: float, batch: torch.Tensor, loop: bool, max_num_neighbors: int
) -> torch.Tensor:
    """torch-cluster's `radius_graph` as it behaves on a GPU: for each target, the first
    `max_num_neighbors` atoms of its molecule within r in index order; here with distances
    rounded otherwise than ours (`torch.cdist`, then up by a relative 10⁻⁶, more than
    float32's rounding) and the edges in a shuffled order."""
    within = (torch.cdist(pos, pos) * (1 + 1e-6) < r) & (batch[:, None] == batch[None, :])
    if not loop:
        within.fill_diagonal_(False)
    edges = [
        (j, i)
        for i, row in enumerate(within.tolist())
        for j in [j for j, close in enumerate(row) if close][:max_num_neighbors]
    ]
    edges = torch.tensor(edges, dtype=torch.long).reshape(-1, 2).t()
    return edges[:, torch.randperm(edges.shape[1], generator=torch.Generator().manual_seed(0))]


@pytest.mark.parametrize(("max_neighbors", "loop"), list(product([2, 5, None], [False, True])))
def test_the_torch_cluster_path_gives_the_pure_torch_graph(monkeypatch, max_neighbors, loop):
    """With a stand-in that has torch-cluster's behaviour: it is asked for every neighbour
    (a cap it cannot reach) a little beyond the cutoff, and the pairs are cut, sorted and
    capped as the pure-torch search's are."""
    monkeypatch.setitem(
        sys.modules, "torch_cluster", SimpleNamespace(radius_graph=first_found_radius_graph)
    )
    for pos, batch in [
        random_clouds(seed=5),
        (point_cloud_batch().pos, point_cloud_batch().molecule),
    ]:
        ours = radius_graph(pos, batch, 3.0, max_neighbors, loop, use_torch_cluster=False)
        theirs = radius_graph(pos, batch, 3.0, max_neighbors, loop, use_torch_cluster=True)
        assert torch.equal(theirs, ours)
    # torch-cluster's own cap, by contrast, keeps the first atoms found
    first = first_found_radius_graph(pos, 3.0, batch, False, 2)
    assert set(edge_list(first)) != set(
        edge_list(radius_graph(pos, batch, 3.0, 2, use_torch_cluster=False))
    )


def test_pairs_just_inside_the_cutoff_survive_torch_clusters_rounding(monkeypatch):
    stand_in = SimpleNamespace(radius_graph=first_found_radius_graph)
    monkeypatch.setitem(sys.modules, "torch_cluster", stand_in)
    pos = torch.tensor([[0.0, 0, 0], [3.0 * (1 - 1e-7), 0, 0]], dtype=torch.float64)
    batch = torch.zeros(2, dtype=torch.long)
    assert first_found_radius_graph(pos, 3.0, batch, False, 8).shape == (2, 0)
    edges = radius_graph(pos, batch, 3.0, use_torch_cluster=True)
    assert edge_list(edges) == [(1, 0), (0, 1)]


@pytest.mark.skipif(not HAS_TORCH_CLUSTER, reason=NO_TORCH_CLUSTER)
@pytest.mark.parametrize(
    ("cutoff", "max_neighbors", "loop"), list(product([1.2, 3.0, 5.0], [2, 8, None], [False, True]))
)
def test_torch_cluster_and_the_pure_torch_search_give_the_same_graph(cutoff, max_neighbors, loop):
    molecules = point_cloud_batch()
    clouds = [(molecules.pos, molecules.molecule), random_clouds(seed=11)]
    devices = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
    for (pos, batch), device in product(clouds, devices):
        ours = radius_graph(pos, batch, cutoff, max_neighbors, loop, use_torch_cluster=False)
        theirs = radius_graph(
            pos.to(device), batch.to(device), cutoff, max_neighbors, loop, use_torch_cluster=True
        )
        assert torch.equal(theirs.cpu(), ours), device
