"""Neighbour graphs inside molecules: the atom pairs closer than a cutoff, nearest first.

`radius_graph` gives one graph, defined below, whether or not torch-cluster is installed
(it has no wheel for every platform and compiles for a quarter of an hour where it has
none), so that a model sees the same neighbours on a laptop and on a GPU node:

- edges j → i (row 0 the source j, row 1 the target i, PyG's `source_to_target` layout)
  for the atoms j ≠ i of i's molecule with |r_i − r_j|² < cutoff², the squared distance
  computed as `squared_distances` computes it;
- at most `max_neighbors` edges into each target i: its nearest neighbours, ties broken
  by the lower atom index;
- ordered by target; within a target, its self-loop first (`loop=True`; the loop does not
  count towards `max_neighbors`), then its neighbours nearest first, ties by index.

Two searches find the candidate pairs, and both go through the same filter, sort and cap:

- torch-cluster, where it is importable, is asked for every pair within a slightly larger
  radius (`RADIUS_SLACK`, which covers its own rounding of distances near the cutoff)
  with a cap no molecule can reach (its largest size): when its cap binds it keeps the
  neighbours it finds first, in index order, not the nearest, so it is never let bind;
- otherwise an exact search over all atom pairs of each molecule: Σ n² distances per
  batch, about a millisecond for 64 drug-sized molecules.

The squared distances are the same elementwise float operations on the same positions in
both paths, so the two give identical edge tensors.
"""

from __future__ import annotations

import importlib.util

import torch

HAS_TORCH_CLUSTER = importlib.util.find_spec("torch_cluster") is not None
RADIUS_SLACK = 1e-4  # torch-cluster searches within cutoff · (1 + slack); we then cut exactly


@torch.compiler.disable  # data-dependent shapes: traced, it breaks into a dozen small graphs
def radius_graph(
    pos: torch.Tensor,
    batch: torch.Tensor,
    cutoff: float,
    max_neighbors: int | None = 32,
    loop: bool = False,
    use_torch_cluster: bool | None = None,
) -> torch.Tensor:
    """The neighbour graph of the module docstring, [2, E] int64.

    `batch` is each atom's molecule, sorted (molecules contiguous), as in every batch
    here. `max_neighbors=None` keeps every neighbour within the cutoff.
    `use_torch_cluster=None` uses torch-cluster when it is installed.
    """
    n_atoms = pos.shape[0]
    if n_atoms == 0:
        return torch.empty(2, 0, dtype=torch.long, device=pos.device)
    if use_torch_cluster is None:
        use_torch_cluster = HAS_TORCH_CLUSTER
    search = torch_cluster_pairs if use_torch_cluster else all_pairs
    source, target = search(pos, batch, cutoff)
    squared = squared_distances(pos, source, target)
    keep = (squared < cutoff * cutoff) & (source != target)
    source, target = nearest_first(source[keep], target[keep], squared[keep])
    if max_neighbors is not None:
        source, target = capped(source, target, n_atoms, max_neighbors)
    edges = torch.stack([source, target])
    return with_self_loops(edges, n_atoms) if loop else edges


def squared_distances(
    pos: torch.Tensor, source: torch.Tensor, target: torch.Tensor
) -> torch.Tensor:
    """|r_i − r_j|² coordinate by coordinate: plain elementwise operations, which round
    alike on every device and for every number of pairs (a reduction might not)."""
    d = pos[target] - pos[source]
    x, y, z = d.unbind(-1)
    return x * x + y * y + z * z


def all_pairs(
    pos: torch.Tensor, batch: torch.Tensor, cutoff: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every ordered pair (j, i) of atoms of one molecule, self-pairs included, by target
    then source: the exact search (`cutoff` is applied by the caller)."""
    n_atoms = pos.shape[0]
    sizes = torch.bincount(batch)
    first = torch.cumsum(sizes, 0) - sizes  # first atom of each molecule
    size_of_atom, first_of_atom = sizes[batch], first[batch]
    n_pairs = int(size_of_atom.sum())
    target = torch.repeat_interleave(
        torch.arange(n_atoms, device=pos.device), size_of_atom, output_size=n_pairs
    )
    pair_start = torch.cumsum(size_of_atom, 0) - size_of_atom
    offset = torch.arange(n_pairs, device=pos.device) - pair_start[target]
    return first_of_atom[target] + offset, target


def torch_cluster_pairs(
    pos: torch.Tensor, batch: torch.Tensor, cutoff: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """torch-cluster's pairs j ≠ i within cutoff · (1 + `RADIUS_SLACK`), all of them (its
    cap is the largest molecule's size, which no atom's neighbour count reaches), sorted
    by target, then source, as `all_pairs` gives them."""
    import torch_cluster

    largest = int(torch.bincount(batch).max())
    source, target = torch_cluster.radius_graph(
        pos,
        r=cutoff * (1.0 + RADIUS_SLACK),
        batch=batch,
        loop=False,
        max_num_neighbors=largest,
    )
    order = torch.argsort(target * pos.shape[0] + source)
    return source[order], target[order]


def nearest_first(
    source: torch.Tensor, target: torch.Tensor, squared: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Edges sorted by target, then squared distance, then source, from edges sorted by
    source within each target (as both searches give them): two stable sorts."""
    order = torch.argsort(squared, stable=True)
    order = order[torch.argsort(target[order], stable=True)]
    return source[order], target[order]


def capped(
    source: torch.Tensor, target: torch.Tensor, n_atoms: int, max_neighbors: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The first `max_neighbors` edges into each target, of edges sorted by target."""
    per_target = torch.bincount(target, minlength=n_atoms)
    first_edge = torch.cumsum(per_target, 0) - per_target
    rank = torch.arange(len(target), device=target.device) - first_edge[target]
    keep = rank < max_neighbors
    return source[keep], target[keep]


def with_self_loops(edges: torch.Tensor, n_atoms: int) -> torch.Tensor:
    """Edges sorted by target with each atom's loop i → i placed before its other edges.

    No sort: edge e into target t moves t + 1 places (the loops of targets 0 … t come
    before it), and atom i's loop goes after the edges into atoms before i and their
    loops."""
    target = edges[1]
    atoms = torch.arange(n_atoms, device=edges.device)
    per_target = torch.bincount(target, minlength=n_atoms)
    first_edge = torch.cumsum(per_target, 0) - per_target
    out = edges.new_empty(2, edges.shape[1] + n_atoms)
    out[:, first_edge + atoms] = atoms
    out[:, torch.arange(edges.shape[1], device=edges.device) + target + 1] = edges
    return out
