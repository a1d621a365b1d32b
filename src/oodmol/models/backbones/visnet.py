"""ViSNet (Wang et al., "Enhancing geometric representations for molecules with equivariant
vector-scalar interactive message passing", Nature Communications 15, 313, 2024), PyTorch
Geometric's model.

PyG's `ViSNetBlock` is the representation: an atom embedding refined by a neighbour
embedding, then `num_layers` ViS-MP layers that update scalar atom features, vector atom
features (spherical harmonics of the edge directions up to `lmax`) and scalar edge
features, with runtime geometry (the vector-rejection dot products), and final layer
norms. ViSNet's QM9 output model (`EquivariantScalar`) is two gated equivariant blocks,
hidden → hidden/2 → 1, whose scalar outputs are summed over atoms. Changes:

- the neighbour search inside `ViSNetBlock.distance` is swapped for `Distance` below,
  the same edges and self-loops from `oodmol.models.neighbors.radius_graph` (PyG's calls
  torch-cluster);
- the output: the first gated block is PyG's; of the second, only the part that reaches
  the scalar output is kept, [x ‖ |W v|] → Linear → SiLU (its vector gate only fed PyG's
  `v.sum() * 0`), and its last Linear is the shared head. The backbone returns these
  per-atom vectors (`hidden_channels // 2` wide); the task's readout sums (extensive) or
  averages (intensive, where ViSNet's `reduce_op` would be "mean") them, and the head maps
  them to the property: ViSNet's output with one bias per molecule instead of per atom.

Its `Atomref` prior and `mean`/`std` are left out: targets are standardised by the module.
The scalar output is invariant to rotations, reflections, translations and permutations:
vector features only enter scalars through dot products and norms over their (3 + 5)
components, on which O(3) acts orthogonally (real spherical harmonics), and no cross
product is used.
"""

from __future__ import annotations

import torch
from torch import nn
from torch_geometric.nn.models import visnet

from oodmol.data.batches import PointCloudBatch
from oodmol.models.neighbors import radius_graph


class Distance(visnet.Distance):
    """PyG's ViSNet `Distance` on `radius_graph`: edges j → i within the cutoff (at most
    `max_num_neighbors` per atom i) and, with `add_self_loops`, one loop per atom; returns
    the edges, their lengths (0 for loops) and vectors r_j − r_i."""

    def forward(
        self, pos: torch.Tensor, batch: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        edge_index = radius_graph(pos, batch, self.cutoff, self.max_num_neighbors)
        edge_vec = pos[edge_index[0]] - pos[edge_index[1]]
        edge_weight = edge_vec.norm(dim=-1)
        if self.add_self_loops:
            atoms = torch.arange(len(pos), device=pos.device)
            edge_index = torch.cat([edge_index, torch.stack([atoms, atoms])], dim=1)
            edge_vec = torch.cat([edge_vec, pos.new_zeros(len(pos), 3)])
            edge_weight = torch.cat([edge_weight, pos.new_zeros(len(pos))])
        return edge_index, edge_weight, edge_vec


class ViSNet(nn.Module):
    """PyG's `ViSNetBlock` and ViSNet's scalar output model up to its last hidden layer;
    returns `(h, segment)` with `h` of width `hidden_channels // 2`."""

    def __init__(
        self,
        lmax: int = 2,
        vecnorm_type: str | None = "max_min",
        trainable_vecnorm: bool = False,
        num_heads: int = 8,
        num_layers: int = 9,
        hidden_channels: int = 512,
        num_rbf: int = 64,
        trainable_rbf: bool = False,
        max_z: int = 100,
        cutoff: float = 5.0,
        max_neighbors: int = 32,
        vertex: bool = False,
    ) -> None:
        super().__init__()
        self.representation = visnet.ViSNetBlock(
            lmax=lmax,
            vecnorm_type=vecnorm_type,
            trainable_vecnorm=trainable_vecnorm,
            num_heads=num_heads,
            num_layers=num_layers,
            hidden_channels=hidden_channels,
            num_rbf=num_rbf,
            trainable_rbf=trainable_rbf,
            max_z=max_z,
            cutoff=cutoff,
            max_num_neighbors=max_neighbors,
            vertex=vertex,
        )
        self.representation.distance = Distance(cutoff, max_neighbors)
        half = hidden_channels // 2
        self.gated = visnet.GatedEquivariantBlock(hidden_channels, half, scalar_activation=True)
        # the second gated block's path to its scalar output, minus the final Linear
        self.vec_proj = nn.Linear(half, half, bias=False)
        self.lin = nn.Linear(2 * half, half)
        self.act = nn.SiLU()
        self.out_dim = half
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """PyG's initialisation (Xavier-uniform weights, zero biases)."""
        self.representation.reset_parameters()
        self.gated.reset_parameters()
        nn.init.xavier_uniform_(self.vec_proj.weight)
        nn.init.xavier_uniform_(self.lin.weight)
        self.lin.bias.data.zero_()

    def forward(self, batch: PointCloudBatch) -> tuple[torch.Tensor, torch.Tensor]:
        segment = batch.molecule
        x, v = self.representation(batch.z, batch.pos, segment)
        x, v = self.gated(x, v)
        x = torch.cat([x, torch.norm(self.vec_proj(v), dim=-2)], dim=-1)
        return self.act(self.lin(x)), segment
