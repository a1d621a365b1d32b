"""Radial bases: a pair distance r expanded into K smooth features [..., K], the input of
the distance filters of the 3D models."""

from __future__ import annotations

import math

import torch
from torch import nn

from oodmol.models.blocks.cutoffs import CosineCutoff


def _register(module: nn.Module, name: str, value: torch.Tensor, trainable: bool) -> None:
    """`value` as a trained parameter or as a fixed buffer (both saved in the state dict)."""
    if trainable:
        module.register_parameter(name, nn.Parameter(value))
    else:
        module.register_buffer(name, value)


class GaussianBasis(nn.Module):
    """exp(−(r − μ_k)² / 2Δ²): K Gaussians centred evenly from `start` to `cutoff`, Δ
    their spacing (SchNet, Schütt et al., NeurIPS 2017; PyG's and TorchMD-Net's
    `GaussianSmearing`). With `trainable` the centres and the common width are learnt.
    No cutoff envelope: models multiply by one where they need it."""

    def __init__(
        self, num_rbf: int, cutoff: float, start: float = 0.0, trainable: bool = False
    ) -> None:
        super().__init__()
        if num_rbf < 2:
            raise ValueError(f"num_rbf must be at least 2 (a spacing), not {num_rbf}")
        offsets = torch.linspace(start, cutoff, num_rbf)
        _register(self, "offsets", offsets, trainable)
        _register(self, "coeff", -0.5 / (offsets[1] - offsets[0]) ** 2, trainable)

    def forward(self, r: torch.Tensor) -> torch.Tensor:
        return torch.exp(self.coeff * (r.unsqueeze(-1) - self.offsets) ** 2)


class ExpNormalBasis(nn.Module):
    """PhysNet's exponential-normal functions exp(−β_k (exp(−α r) − μ_k)²), α = 5 / r_c,
    times the cosine cutoff (Unke & Meuwly, JCTC 15, 3678, 2019), with TorchMD-Net's
    initial centres μ_k evenly in [exp(−r_c), 1] and widths β_k = (2 (1 − exp(−r_c)) / K)⁻²
    (`ExpNormalSmearing`; TorchMD-Net's ET, GotenNet). Narrow near r = 0 and wide near the
    cutoff, where distances matter less. `trainable` learns μ and β."""

    def __init__(self, num_rbf: int, cutoff: float, trainable: bool = False) -> None:
        super().__init__()
        self.alpha = 5.0 / cutoff
        self.cutoff_fn = CosineCutoff(cutoff)
        start = math.exp(-cutoff)
        _register(self, "means", torch.linspace(start, 1.0, num_rbf), trainable)
        betas = torch.full((num_rbf,), (2.0 / num_rbf * (1.0 - start)) ** -2)
        _register(self, "betas", betas, trainable)

    def forward(self, r: torch.Tensor) -> torch.Tensor:
        r = r.unsqueeze(-1)
        smooth = self.cutoff_fn(r)
        return smooth * torch.exp(-self.betas * (torch.exp(-self.alpha * r) - self.means) ** 2)


class BesselBasis(nn.Module):
    """sin(nπ r / r_c) / r for n = 1 … K: zeroth-order spherical Bessel functions j₀ up to a
    constant, the radial basis of DimeNet (Gasteiger et al., ICLR 2020), PaiNN (Schütt et
    al., ICML 2021) and MACE (Batatia et al., NeurIPS 2022). `normalize` multiplies by
    √(2 / r_c), which makes them orthonormal on [0, r_c] (MACE); `trainable` learns the
    frequencies nπ / r_c (DimeNet, MACE). No envelope (DimeNet and MACE multiply by a
    `PolynomialCutoff`, PaiNN by a `CosineCutoff`); undefined at r = 0 (self-loops).
    """

    def __init__(
        self, num_rbf: int, cutoff: float, trainable: bool = False, normalize: bool = False
    ) -> None:
        super().__init__()
        frequencies = torch.arange(1, num_rbf + 1) * math.pi / cutoff
        _register(self, "frequencies", frequencies, trainable)
        self.prefactor = math.sqrt(2.0 / cutoff) if normalize else None

    def forward(self, r: torch.Tensor) -> torch.Tensor:
        r = r.unsqueeze(-1)
        basis = torch.sin(r * self.frequencies) / r
        return basis if self.prefactor is None else self.prefactor * basis
