"""MLP backbone on fixed-length molecule vectors (BOOM: two hidden layers of 300)."""

from __future__ import annotations

import torch
from torch import nn

from oodmol.data.batches import VectorBatch
from oodmol.models.heads import dense_layers


class MLPBackbone(nn.Module):
    """Feed-forward layers on a descriptor or fingerprint vector; one vector per molecule."""

    def __init__(self, in_dim: int, hidden: list[int], dropout: float = 0.0) -> None:
        super().__init__()
        dims = [in_dim, *hidden]
        self.net = nn.Sequential(*dense_layers(dims, dropout))
        self.out_dim = dims[-1]

    def forward(self, batch: VectorBatch) -> torch.Tensor:
        return self.net(batch.x)
