"""Equivariant building blocks for models with vector features v [N, 3, F] (each channel a
3-vector that rotates with the molecule)."""

from __future__ import annotations

import torch
from torch import nn

EPS = 1e-8  # inside the square root of vector norms: a finite gradient at zero vectors


def vector_norm(v: torch.Tensor, dim: int = 1) -> torch.Tensor:
    """√(|v|² + ε) along the Cartesian axis: smooth where a vector feature is still zero
    (every vector channel starts at zero)."""
    return torch.sqrt(v.pow(2).sum(dim) + EPS)


class GatedEquivariantBlock(nn.Module):
    """PaiNN's gated equivariant block (Schütt, Unke & Gastegger, ICML 2021, Fig. 3):
    scalars s [N, F] and vectors v [N, 3, F] in, scalars [N, out] and vectors [N, 3, out]
    out.

    Two bias-free linear maps mix the vector channels into V v and W v; an MLP on
    [s ‖ |V v|] gives the new scalars and one gate per output vector channel, which scales
    W v. Only norms enter the MLP and the vectors are only rescaled, so scalars stay
    invariant and vectors equivariant under any orthogonal map. TorchMD-Net's block
    differs in one width: its norm is taken of F mixed channels, here of `out_dim`.
    """

    def __init__(
        self, in_dim: int, out_dim: int, hidden: int, scalar_activation: bool = False
    ) -> None:
        super().__init__()
        self.out_dim = out_dim
        self.vector_mix = nn.Linear(in_dim, 2 * out_dim, bias=False)
        self.net = nn.Sequential(
            nn.Linear(in_dim + out_dim, hidden), nn.SiLU(), nn.Linear(hidden, 2 * out_dim)
        )
        self.scalar_activation = nn.SiLU() if scalar_activation else nn.Identity()

    def forward(self, s: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        v_v, v_w = torch.split(self.vector_mix(v), self.out_dim, dim=-1)
        s, gate = torch.split(self.net(torch.cat([s, vector_norm(v_v)], dim=-1)), self.out_dim, -1)
        return self.scalar_activation(s), gate.unsqueeze(1) * v_w
