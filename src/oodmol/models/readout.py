"""Pooling per-atom embeddings into one vector per molecule."""

from __future__ import annotations

import torch
from torch import nn


class Readout(nn.Module):
    """Sum for extensive properties (they grow with the molecule), mean for intensive ones.

    A backbone that already returns one vector per molecule (descriptor and fingerprint
    models) passes through unchanged.
    """

    def __init__(self, extensive: bool) -> None:
        super().__init__()
        self.extensive = extensive

    def forward(
        self, h: torch.Tensor, segment: torch.Tensor | None = None, n_molecules: int = 0
    ) -> torch.Tensor:
        if segment is None:
            return h
        pooled = h.new_zeros(n_molecules, h.shape[-1]).index_add_(0, segment, h)
        if self.extensive:
            return pooled
        counts = torch.bincount(segment, minlength=n_molecules).clamp(min=1)
        return pooled / counts.unsqueeze(-1).to(h.dtype)
