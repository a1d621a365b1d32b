"""Graphormer-3D as BOOM ran it (FLASK-LLNL/BOOM, `experiments/graphormer3d/src/
modules.py`), read from that code and written anew; parameter names follow its modules
(`embed_node`, `embed_edge`, `convs.<k>.node_attn.lin_Q` …) so that its checkpoints map
one to one (BOOM's `model.encoder.` / `model.processor.` prefixes dropped, and its
decoder's last Linear is our shared head).

- Encoder: a learnt embedding of each atom's element (every element: BOOM's encoded only
  H, C, N, O) and an MLP 1 → E → E (SiLU) of each pair's distance.
- `num_convs` post-LayerNorm layers, x ← LN(x + Attn(x)), x ← LN(x + FFN(x)), the FFN
  d → ff → d with SiLU. Attn is multi-head attention of each receiver i over its
  neighbours j, the scores q_i·k_j / √d_k plus a per-head bias from the pair's edge
  features (an MLP E → E → heads, SiLU), softmax over the receiver's neighbours.
- Readout: mean over the molecule's atoms (intensive tasks) or sum (extensive), then
  BOOM's decoder d → d → 1 (SiLU): the backbone ends after its first Linear and SiLU,
  the shared head is the last Linear.

Neighbours: by default every other atom of the molecule (the full graph BOOM meant). BOOM
built its graph with torch-cluster's `radius_graph(pos, r=1e6)`, whose default cap of 32
neighbours silently truncates molecules of more than 33 atoms; `max_neighbors=32` gives
that truncation, keeping each atom's 32 nearest (torch-cluster kept the first its search
found, an order that depends on its implementation, not on the molecule alone).

Only distances enter, so predictions are invariant under rotations, reflections,
translations and permutations of the atoms. The attention runs on padded B × heads × N ×
N score tensors (scores outside the graph masked), which gives the per-receiver softmax
of BOOM's edge-list code without E × d gathers; the pair MLPs run on the edges alone.
"""

from __future__ import annotations

import itertools
import math
from typing import NamedTuple

import torch
from torch import nn
from torch_geometric.utils import to_dense_batch

from oodmol.data.batches import PointCloudBatch
from oodmol.models.neighbors import all_pairs, radius_graph


def mlp(dims: list[int]) -> nn.Sequential:
    """Linear layers with SiLU between them (not after the last): BOOM's `MLP`."""
    layers: list[nn.Module] = []
    for k, (a, b) in enumerate(itertools.pairwise(dims)):
        layers.append(nn.Linear(a, b))
        if k < len(dims) - 2:
            layers.append(nn.SiLU())
    return nn.Sequential(*layers)


class PairGraph(NamedTuple):
    """Where each atom sits in the padded [B, N] tensors, and each edge j → i in the
    padded [B, N, N] score tensors."""

    atom_molecule: torch.Tensor  # [N_atoms]: each atom's molecule (sorted)
    atom_mask: torch.Tensor  # [B, N]: True where a padded position holds an atom
    molecule: torch.Tensor  # [E]: the edge's molecule
    receiver: torch.Tensor  # [E]: i's position in its molecule
    sender: torch.Tensor  # [E]: j's position in its molecule
    n_molecules: int
    n_max: int  # the largest molecule's atom count


def pair_graph(edges: torch.Tensor, molecule: torch.Tensor, n_molecules: int) -> PairGraph:
    """The padded positions of the atoms and of `edges` ([2, E], row 0 the sender j, row
    1 the receiver i) of a batch whose atoms are sorted by `molecule`."""
    sizes = torch.bincount(molecule, minlength=n_molecules)
    first = torch.cumsum(sizes, 0) - sizes
    local = torch.arange(len(molecule), device=molecule.device) - first[molecule]
    sender, receiver = edges
    n_max = int(sizes.max()) if len(sizes) else 0
    atom_mask = torch.arange(n_max, device=molecule.device) < sizes.unsqueeze(-1)
    return PairGraph(
        molecule,
        atom_mask,
        molecule[receiver],
        local[receiver],
        local[sender],
        n_molecules,
        n_max,
    )


class NodeAttention(nn.Module):
    """Multi-head attention of each receiver over its graph neighbours, with a per-head
    bias from the edge features; softmax per receiver (BOOM's `NodeAttention`). A
    receiver without neighbours (a lone atom) gets zero."""

    def __init__(self, dim: int, num_heads: int, edge_dim: int) -> None:
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"node_dim {dim} must be divisible by num_heads {num_heads}")
        self.dim = dim
        self.num_heads = num_heads
        self.lin_Q = nn.Linear(dim, dim)
        self.lin_K = nn.Linear(dim, dim)
        self.lin_V = nn.Linear(dim, dim)
        self.lin_O = nn.Linear(dim, dim)
        self.edge_bias = mlp([edge_dim, edge_dim, num_heads])

    def heads(self, h: torch.Tensor, graph: PairGraph) -> torch.Tensor:
        """Per-atom [N_atoms, d] → padded [B, heads, N, d_k]."""
        dense, _ = to_dense_batch(h, graph.atom_molecule, 0.0, graph.n_max, graph.n_molecules)
        return dense.view(graph.n_molecules, graph.n_max, self.num_heads, -1).transpose(1, 2)

    def forward(self, x: torch.Tensor, graph: PairGraph, edge_attr: torch.Tensor) -> torch.Tensor:
        d_k = self.dim // self.num_heads
        q, k, v = (self.heads(lin(x), graph) for lin in (self.lin_Q, self.lin_K, self.lin_V))
        scores = q @ k.transpose(-1, -2) / math.sqrt(d_k)  # [B, heads, N (i), N (j)]
        bias = scores.new_zeros(graph.n_molecules, graph.n_max, graph.n_max, self.num_heads)
        in_graph = torch.zeros(bias.shape[:3], dtype=torch.bool, device=x.device)
        where = (graph.molecule, graph.receiver, graph.sender)
        bias[where] = self.edge_bias(edge_attr)
        in_graph[where] = True
        scores = (scores + bias.permute(0, 3, 1, 2)).masked_fill(
            ~in_graph.unsqueeze(1), torch.finfo(scores.dtype).min
        )
        has_neighbours = in_graph.any(-1).unsqueeze(1).unsqueeze(-1).to(scores.dtype)
        alpha = torch.softmax(scores, dim=-1) * has_neighbours
        out = (alpha @ v).transpose(1, 2).reshape(graph.n_molecules, graph.n_max, self.dim)
        return self.lin_O(out[graph.atom_mask])


class GraphormerConv(nn.Module):
    """One post-LayerNorm layer: attention, then the SiLU feed-forward, each residual."""

    def __init__(self, dim: int, num_heads: int, ff_dim: int, edge_dim: int) -> None:
        super().__init__()
        self.node_attn = NodeAttention(dim, num_heads, edge_dim)
        self.norm1 = nn.LayerNorm(dim)
        self.norm2 = nn.LayerNorm(dim)
        self.ffn = mlp([dim, ff_dim, dim])

    def forward(self, x: torch.Tensor, graph: PairGraph, edge_attr: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.node_attn(x, graph, edge_attr))
        return self.norm2(x + self.ffn(x))


class Graphormer3D(nn.Module):
    """BOOM's Graphormer-3D on point clouds; one vector per molecule (the decoder's hidden
    layer after pooling) for the shared head. See the module docstring."""

    def __init__(
        self,
        node_dim: int = 640,
        ff_dim: int = 640,
        edge_dim: int = 512,
        num_convs: int = 17,
        num_heads: int = 8,
        extensive: bool = False,
        max_neighbors: int | None = None,
        max_z: int = 119,
    ) -> None:
        super().__init__()
        if max_neighbors is not None and max_neighbors < 1:
            raise ValueError(f"max_neighbors must be positive or null, not {max_neighbors}")
        self.extensive = extensive
        self.max_neighbors = max_neighbors
        self.max_z = max_z
        self.embed_node = nn.Embedding(max_z, node_dim)
        self.embed_edge = mlp([1, edge_dim, edge_dim])
        self.convs = nn.ModuleList(
            GraphormerConv(node_dim, num_heads, ff_dim, edge_dim) for _ in range(num_convs)
        )
        self.decoder = nn.Sequential(nn.Linear(node_dim, node_dim), nn.SiLU())
        self.out_dim = node_dim

    def edges(self, pos: torch.Tensor, molecule: torch.Tensor) -> torch.Tensor:
        """[2, E] edges j → i: every pair of distinct atoms of a molecule, or each atom's
        `max_neighbors` nearest."""
        if self.max_neighbors is not None:
            return radius_graph(
                pos, molecule, math.inf, self.max_neighbors, use_torch_cluster=False
            )
        sender, receiver = all_pairs(pos, molecule, math.inf)
        distinct = sender != receiver
        return torch.stack([sender[distinct], receiver[distinct]])

    def forward(self, batch: PointCloudBatch) -> torch.Tensor:
        z, pos, molecule = batch.z, batch.pos, batch.molecule
        if len(z) and (int(z.min()) < 0 or int(z.max()) >= self.max_z):
            raise ValueError(
                f"atomic numbers must lie in [0, {self.max_z}); got {int(z.min())}…{int(z.max())}"
            )
        n_molecules = len(batch)
        edges = self.edges(pos, molecule)
        length = torch.linalg.vector_norm(pos[edges[0]] - pos[edges[1]], dim=-1)
        edge_attr = self.embed_edge(length.unsqueeze(-1))
        graph = pair_graph(edges, molecule, n_molecules)
        x = self.embed_node(z)
        for conv in self.convs:
            x = conv(x, graph, edge_attr)
        pooled = x.new_zeros(n_molecules, x.shape[-1]).index_add_(0, molecule, x)
        if not self.extensive:
            counts = torch.bincount(molecule, minlength=n_molecules).clamp(min=1)
            pooled = pooled / counts.unsqueeze(-1).to(x.dtype)
        return self.decoder(pooled)
