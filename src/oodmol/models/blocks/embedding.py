"""TorchMD-Net's neighbour embedding: an atom's initial features also see which elements
surround it, and how far away."""

from __future__ import annotations

import torch
from torch import nn

from oodmol.models.blocks.cutoffs import CosineCutoff


class NeighborEmbedding(nn.Module):
    """x_i ← W_c [x_i ‖ Σ_{j≠i} W_d(rbf(r_ij)) f_cut(r_ij) ∘ e′(z_j)], with e′ a second
    element embedding and f_cut the cosine cutoff (Thölke & De Fabritiis, ICLR 2022,
    eq. 3; TorchMD-Net's `NeighborEmbedding`, also ViSNet's).

    Self-loops in the graph are given zero weight rather than removed (no copy, no host
    sync), so the radial basis must be finite at r = 0 when the graph has them
    (`ExpNormalBasis` and `GaussianBasis` are).
    """

    def __init__(self, hidden: int, num_rbf: int, cutoff: float, max_z: int = 100) -> None:
        super().__init__()
        self.embedding = nn.Embedding(max_z, hidden)
        self.distance_proj = nn.Linear(num_rbf, hidden)
        self.combine = nn.Linear(2 * hidden, hidden)
        self.cutoff_fn = CosineCutoff(cutoff)

    def forward(
        self,
        z: torch.Tensor,
        x: torch.Tensor,
        edge_index: torch.Tensor,
        length: torch.Tensor,
        rbf: torch.Tensor,
    ) -> torch.Tensor:
        """z [N] elements, x [N, F] features, edges j → i [2, E] with their lengths [E] and
        radial features [E, K]; returns the new x [N, F]."""
        j, i = edge_index
        weight = self.cutoff_fn(length) * (j != i)
        w = self.distance_proj(rbf) * weight.unsqueeze(-1)
        neighbours = torch.zeros_like(x).index_add_(0, i, w * self.embedding(z).index_select(0, j))
        return self.combine(torch.cat([x, neighbours], dim=-1))
