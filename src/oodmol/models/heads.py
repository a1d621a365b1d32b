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
    """Feed-forward head; one output (the standardised property) or, for a likelihood
    with more parameters (mean and variance), one per parameter."""

    def __init__(
        self,
        in_dim: int,
        hidden: list[int] | None = None,
        dropout: float = 0.0,
        n_outputs: int = 1,
    ):
        super().__init__()
        dims = [in_dim, *(hidden or [])]
        self.n_outputs = n_outputs
        self.net = nn.Sequential(*dense_layers(dims, dropout), nn.Linear(dims[-1], n_outputs))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.net(x)
        return out.squeeze(-1) if self.n_outputs == 1 else out
