"""Cutoff functions f(r): envelopes that take a pair's contribution smoothly to zero at the
cutoff radius r_c, so that an atom crossing the cutoff changes the output continuously."""

from __future__ import annotations

import math

import torch
from torch import nn


class CosineCutoff(nn.Module):
    """Behler's f(r) = ½ (cos(π r / r_c) + 1) below r_c, 0 from r_c on (Behler &
    Parrinello, PRL 98, 146401, 2007); SchNet's, PaiNN's and TorchMD-Net's cutoff. f and
    its first derivative vanish at r_c."""

    def __init__(self, cutoff: float) -> None:
        super().__init__()
        self.cutoff = cutoff

    def forward(self, r: torch.Tensor) -> torch.Tensor:
        return 0.5 * (torch.cos(r * math.pi / self.cutoff) + 1.0) * (r < self.cutoff).to(r.dtype)


class PolynomialCutoff(nn.Module):
    """The polynomial envelope of DimeNet (Gasteiger, Groß & Günnemann, ICLR 2020) as MACE
    uses it (Batatia et al., NeurIPS 2022), with d = r / r_c:

        u(d) = 1 − (p+1)(p+2)/2 · d^p + p(p+2) · d^(p+1) − p(p+1)/2 · d^(p+2)  for d < 1,

    0 from r_c on. u(0) = 1, and u, u′ and u″ vanish at r_c: smoother than the cosine
    cutoff where forces or second derivatives matter. DimeNet uses p = 6 (PyG's
    `envelope_exponent` is p − 1, and its envelope also divides by d), MACE p = 5.
    """

    def __init__(self, cutoff: float, p: int = 6) -> None:
        super().__init__()
        self.cutoff = cutoff
        self.p = p

    def forward(self, r: torch.Tensor) -> torch.Tensor:
        p, d = self.p, r / self.cutoff
        u = (
            1.0
            - (p + 1) * (p + 2) / 2 * d.pow(p)
            + p * (p + 2) * d.pow(p + 1)
            - p * (p + 1) / 2 * d.pow(p + 2)
        )
        return u * (d < 1.0).to(r.dtype)
