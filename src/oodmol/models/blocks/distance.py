"""From atom positions to the edges of the neighbour graph and their geometry, the first
step of every message-passing 3D model (TorchMD-Net's `Distance`)."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from oodmol.models.neighbors import radius_graph


class Edges(NamedTuple):
    """Edges j → i of a neighbour graph (`oodmol.models.neighbors` defines which and in
    what order) with their geometry."""

    index: torch.Tensor  # [2, E]: row 0 the source j, row 1 the target i
    vector: torch.Tensor  # [E, 3]: r_j − r_i
    length: torch.Tensor  # [E]: |r_j − r_i|, 0 for self-loops
    direction: torch.Tensor  # [E, 3]: the unit vector along r_j − r_i, 0 for self-loops


class Distance(nn.Module):
    """The neighbour graph of a batch within `cutoff` (at most `max_neighbors` nearest per
    atom, `None` for all; with `loop`, a self-loop per atom on top) and its edge geometry.

    Self-loops get length 0 and direction 0 with finite gradients: their norm is taken of
    a stand-in vector, where the norm of a zero vector would give NaN gradients
    (TorchMD-Net masks them for the same reason).
    """

    def __init__(self, cutoff: float, max_neighbors: int | None = 32, loop: bool = False) -> None:
        super().__init__()
        self.cutoff = cutoff
        self.max_neighbors = max_neighbors
        self.loop = loop

    def forward(self, pos: torch.Tensor, molecule: torch.Tensor) -> Edges:
        """pos [N, 3] in Å and each atom's molecule [N] (sorted)."""
        index = radius_graph(pos, molecule, self.cutoff, self.max_neighbors, self.loop)
        vector = pos[index[0]] - pos[index[1]]
        if not self.loop:
            length = torch.linalg.vector_norm(vector, dim=-1)
            return Edges(index, vector, length, vector / length.unsqueeze(-1))
        is_loop = (index[0] == index[1]).unsqueeze(-1)
        norm = torch.linalg.vector_norm(vector.masked_fill(is_loop, 1.0), dim=-1)
        length = norm.masked_fill(is_loop.squeeze(-1), 0.0)
        return Edges(index, vector, length, vector / norm.unsqueeze(-1))
