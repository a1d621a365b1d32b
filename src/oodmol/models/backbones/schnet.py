"""SchNet (Schütt et al., NeurIPS 2017; J. Chem. Phys. 2018) on PyTorch Geometric's
parameters, with a forward of our own.

The class keeps PyG's `SchNet` modules and state-dict keys (atom-type embedding,
`num_interactions` residual interaction blocks whose continuous filters are MLPs of a
Gaussian expansion of the distance times a cosine cutoff, then a per-atom Linear →
shifted softplus), so checkpoints and PyG's initialisation carry over, but `forward`
computes the same function in fewer operations (tests check it against PyG's forward,
outputs and gradients, in float64):

- the geometry once: distances, Gaussians and cutoff are shared by every interaction;
- the filters once per undirected atom pair instead of per directed edge (a filter
  depends on the distance only, so edges j → i and i → j share it): half the rows of
  the filter MLPs, the dominant matmuls; a pair reached in one direction only (the
  `max_neighbors` cap is not symmetric) simply has one edge;
- the filter MLPs' first Linears of all interactions as one matmul;
- messages gathered and summed with channel-expanded indices (`gather`, `scatter_add_`)
  instead of PyG's `MessagePassing`.

Two changes from PyG's model itself, neither touching the maths:

- the neighbour graph comes from `oodmol.models.neighbors.radius_graph` (PyG's default
  needs torch-cluster); `interaction_graph` is kept for PyG's own forward;
- the per-atom MLP's last Linear is the shared head: the backbone returns the per-atom
  vectors after the shifted softplus (`hidden_channels // 2` wide), the task's readout
  sums (extensive) or averages (intensive) them, as schnetpack pooled QM9 targets, and
  the head's Linear maps the result to the property. A linear map commutes with the
  readout, so this is SchNet's output except that its bias is added once per molecule
  instead of once per atom (and is initialised by the head, not zeroed by SchNet).

PyG's `atomref`, `mean`/`std` and `dipole` options are left unused: targets are
standardised by the module, and μ is fitted as a plain scalar like every other task.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn.models import schnet

from oodmol.data.batches import PointCloudBatch
from oodmol.models.neighbors import radius_graph

LOG2 = math.log(2.0)


class RadiusGraph(nn.Module):
    """SchNet's `interaction_graph`: edges j → i within `cutoff` and their lengths."""

    def __init__(self, cutoff: float, max_neighbors: int) -> None:
        super().__init__()
        self.cutoff = cutoff
        self.max_neighbors = max_neighbors

    def forward(self, pos: torch.Tensor, batch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        edge_index = radius_graph(pos, batch, self.cutoff, self.max_neighbors)
        source, target = edge_index
        return edge_index, (pos[source] - pos[target]).norm(dim=-1)


def undirected_pairs(
    pos: torch.Tensor, edge_index: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each edge's undirected atom pair and each pair's length: `(pair_of_edge [E],
    length [P])`, P ≤ E, where edges j → i and i → j share one pair."""
    low, high = edge_index.min(dim=0).values, edge_index.max(dim=0).values
    pairs, pair_of_edge = torch.unique(low * len(pos) + high, return_inverse=True)
    a, b = pairs // len(pos), pairs % len(pos)
    return pair_of_edge, (pos[a] - pos[b]).norm(dim=-1)


def shifted_softplus(x: torch.Tensor) -> torch.Tensor:
    return F.softplus(x) - LOG2


class SchNet(schnet.SchNet):
    """PyG's SchNet up to the per-atom output MLP's hidden layer; returns `(h, segment)`
    with `h` of width `hidden_channels // 2` for the shared readout and head."""

    def __init__(
        self,
        hidden_channels: int = 128,
        num_filters: int = 128,
        num_interactions: int = 6,
        num_gaussians: int = 50,
        cutoff: float = 10.0,
        max_neighbors: int = 32,
    ) -> None:
        super().__init__(
            hidden_channels=hidden_channels,
            num_filters=num_filters,
            num_interactions=num_interactions,
            num_gaussians=num_gaussians,
            cutoff=cutoff,
            interaction_graph=RadiusGraph(cutoff, max_neighbors),
            max_num_neighbors=max_neighbors,
        )
        del self.lin2  # SchNet's last Linear is the shared head
        self.max_neighbors = max_neighbors
        self.out_dim = hidden_channels // 2

    def reset_parameters(self) -> None:
        """PyG's initialisation of the layers kept (`lin2` is gone, see the class)."""
        self.embedding.reset_parameters()
        for interaction in self.interactions:
            interaction.reset_parameters()
        nn.init.xavier_uniform_(self.lin1.weight)
        self.lin1.bias.data.zero_()

    def filters(self, length: torch.Tensor) -> list[torch.Tensor]:
        """Every interaction's continuous filter for pairs of these lengths, [P, filters]
        each: Gaussians and cutoff once, the first Linears of all filter MLPs as one
        matmul, and the shift of the shifted softplus between the two Linears folded
        into the second one's bias (ssp(u) W + b = softplus(u) W + (b − log 2 · W 1))."""
        gaussians = self.distance_expansion(length)
        cut = 0.5 * (torch.cos(length * (math.pi / self.cutoff)) + 1.0)
        first = [interaction.mlp[0] for interaction in self.interactions]
        hidden = F.softplus(
            F.linear(
                gaussians,
                torch.cat([lin.weight for lin in first]),
                torch.cat([lin.bias for lin in first]),
            )
        )
        filters = []
        for interaction, part in zip(
            self.interactions, hidden.split(self.num_filters, dim=-1), strict=True
        ):
            second = interaction.mlp[2]
            bias = second.bias - LOG2 * second.weight.sum(dim=1)
            filters.append(F.linear(part, second.weight, bias) * cut.unsqueeze(-1))
        return filters

    def forward(self, batch: PointCloudBatch) -> tuple[torch.Tensor, torch.Tensor]:
        segment = batch.molecule
        edge_index = radius_graph(batch.pos, segment, self.cutoff, self.max_neighbors)
        pair_of_edge, length = undirected_pairs(batch.pos, edge_index)
        # gather/scatter with indices expanded over the channels: on CPU several times
        # faster than index_select (and its index_add backward) on the same rows
        source, target, pair_of_edge = (
            index.unsqueeze(-1).expand(-1, self.num_filters)
            for index in (*edge_index, pair_of_edge)
        )
        h = self.embedding(batch.z)
        for interaction, pair_filter in zip(self.interactions, self.filters(length), strict=True):
            conv = interaction.conv
            x = conv.lin1(h)
            messages = x.gather(0, source) * pair_filter.gather(0, pair_of_edge)
            x = messages.new_zeros(x.shape).scatter_add_(0, target, messages)
            h = h + interaction.lin(shifted_softplus(conv.lin2(x)))
        return shifted_softplus(self.lin1(h)), segment
