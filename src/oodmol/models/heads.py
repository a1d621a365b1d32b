"""The head: from a molecule vector to the (standardised) prediction."""

from __future__ import annotations

import itertools

import torch
from torch import nn


def dense_layers(dims: list[int], dropout: float = 0.0) -> list[nn.Module]:
    """Linear → ReLU → Dropout for each consecutive pair of widths."""
    layers: list[nn.Module] = []
    for a, b in itertools.pairwise(dims):
        layers += [nn.Linear(a, b), nn.ReLU(), nn.Dropout(dropout)]
    return layers


class RegressionHead(nn.Module):
    """Feed-forward head with one output (the standardised property)."""

    def __init__(self, in_dim: int, hidden: list[int] | None = None, dropout: float = 0.0):
        super().__init__()
        dims = [in_dim, *(hidden or [])]
        self.net = nn.Sequential(*dense_layers(dims, dropout), nn.Linear(dims[-1], 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).squeeze(-1)
