"""SchNet (Schütt et al., NeurIPS 2017; J. Chem. Phys. 2018), PyTorch Geometric's model.

PyG's `SchNet` is used as is: atom-type embedding, `num_interactions` residual
interaction blocks whose continuous filters are MLPs of a Gaussian expansion of the
distance (cosine cutoff), then a per-atom MLP Linear → shifted softplus → Linear(·, 1)
summed (or averaged) over the molecule. Two changes, neither touching the maths:

- the neighbour graph comes from `oodmol.models.neighbors.radius_graph` (PyG's default
  needs torch-cluster), through the `interaction_graph` hook SchNet provides;
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

import torch
from torch import nn
from torch_geometric.nn.models import schnet

from oodmol.data.batches import PointCloudBatch
from oodmol.models.neighbors import radius_graph


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
        self.out_dim = hidden_channels // 2

    def reset_parameters(self) -> None:
        """PyG's initialisation of the layers kept (`lin2` is gone, see the class)."""
        self.embedding.reset_parameters()
        for interaction in self.interactions:
            interaction.reset_parameters()
        nn.init.xavier_uniform_(self.lin1.weight)
        self.lin1.bias.data.zero_()

    def forward(self, batch: PointCloudBatch) -> tuple[torch.Tensor, torch.Tensor]:
        segment = batch.molecule
        h = self.embedding(batch.z)
        edge_index, edge_weight = self.interaction_graph(batch.pos, segment)
        edge_attr = self.distance_expansion(edge_weight)
        for interaction in self.interactions:
            h = h + interaction(h, edge_index, edge_weight, edge_attr)
        return self.act(self.lin1(h)), segment
