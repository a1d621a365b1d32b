"""DimeNet's spherical Fourier–Bessel basis (Gasteiger et al., ICLR 2020), computed
numerically.

PyG's `SphericalBasisLayer` derives the same functions with sympy in its constructor
(about 20 s at DimeNet++'s 7 × 6 functions, in every process that builds the model) and
evaluates them as 42 generated expressions. Here the zeros of the spherical Bessel
functions come from root bracketing, rounded to float32 as DimeNet's reference rounds
them; j_l comes from its power series where the closed form cancels (z < l) and from the
upward recurrence elsewhere, Y_l⁰ from Legendre's recurrence. In float64 the values
equal PyG's to its own precision (~1e-6: the constants sympy substitutes); in float32
they are accurate to a few 1e-6 at every order, where the closed forms lose up to 1e-3
at order 6 on short bonds.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch
from scipy import optimize, special
from torch import nn
from torch_geometric.nn.models.dimenet import Envelope

SERIES_TERMS = 16  # j_l's power series below z = l: float64-accurate to l = 6


def spherical_bessel_zeros(orders: int, count: int) -> np.ndarray:
    """The first `count` positive zeros of j_l for l < `orders`, [orders, count], rounded
    to float32. The zeros of j_l interlace those of j_{l-1}, so each order's zeros are
    bracketed by the previous order's, starting from j_0's (kπ)."""
    zeros = np.zeros((orders, count))
    brackets = np.arange(1, count + orders) * np.pi
    zeros[0] = brackets[:count]
    for order in range(1, orders):
        brackets = np.array(
            [
                optimize.brentq(lambda z, n=order: special.spherical_jn(n, z), a, b)
                for a, b in itertools.pairwise(brackets)
            ]
        )
        zeros[order] = brackets[:count]
    return zeros.astype(np.float32)


def series_coefficients(orders: int) -> torch.Tensor:
    """c_{k,l} of j_l(z) = z^l Σ_k c_{k,l} (z²)^k for l < `orders`: c_{0,l} = 1 / (2l + 1)!!,
    c_{k,l} = c_{k-1,l} · (−1/2) / (k (2l + 2k + 1)); [SERIES_TERMS, orders, 1], float64."""
    coefficients = np.zeros((SERIES_TERMS, orders, 1))
    for order in range(orders):
        coefficients[0, order] = 1.0 / math.prod(range(1, 2 * order + 2, 2))
        for k in range(1, SERIES_TERMS):
            coefficients[k, order] = (
                coefficients[k - 1, order] * -0.5 / (k * (2 * order + 2 * k + 1))
            )
    return torch.from_numpy(coefficients)


def spherical_bessel(z: torch.Tensor, coefficients: torch.Tensor) -> torch.Tensor:
    """j_l(z) for z > 0, [..., orders, n]: the order l runs along the second-last axis
    (`coefficients`: `series_coefficients(orders)`). The power series below z = l, where
    the recurrence cancels, and the upward recurrence from j_0 and j_1 above; each branch
    sees only its own range, so neither overflows and the gradient stays finite."""
    orders = z.shape[-2]
    order = torch.arange(orders, dtype=z.dtype, device=z.device)[:, None]
    coefficients = coefficients.to(z.dtype)
    below = z < order
    small = torch.where(below, z, order)  # each branch's gradient on its own range only
    squared = small * small
    series = coefficients[-1].expand_as(small)
    for coefficient in coefficients[:-1].flip(0):  # Horner
        series = torch.addcmul(coefficient, series, squared)
    series = series * small**order
    large = torch.where(below, order, z)
    inverse = 1.0 / large
    previous = torch.sin(large) * inverse
    current = (previous - torch.cos(large)) * inverse
    recurrence = torch.where(order == 0, previous, current)
    for n in range(1, orders - 1):
        previous, current = current, (2 * n + 1) * inverse * current - previous
        recurrence = torch.where(order == n + 1, current, recurrence)
    return torch.where(below, series, recurrence)


def zonal_harmonics(orders: int, angle: torch.Tensor) -> torch.Tensor:
    """Y_l⁰(θ) = √((2l + 1) / 4π) P_l(cos θ) for l < `orders`, [..., orders]."""
    cos = torch.cos(angle)
    legendre = [torch.ones_like(cos), cos][:orders]
    for n in range(2, orders):
        legendre.append(((2 * n - 1) * cos * legendre[-1] - (n - 1) * legendre[-2]) / n)
    scale = [math.sqrt((2 * n + 1) / (4 * math.pi)) for n in range(orders)]
    return torch.stack([s * p for s, p in zip(scale, legendre, strict=True)], dim=-1)


class SphericalBasis(nn.Module):
    """a_{l,n}(d, θ) = envelope(d/c) · N_{l,n} j_l(z_{l,n} d/c) · Y_l⁰(θ), flattened over
    (l, n) as PyG's `SphericalBasisLayer` orders them: per triplet, the radial part of
    its edge k → j (`idx_kj`) times the angular part of its angle. The zeros and
    normalisers are fixed buffers outside the state dict, so checkpoints keep PyG's keys."""

    def __init__(
        self, num_spherical: int, num_radial: int, cutoff: float = 5.0, envelope_exponent: int = 5
    ) -> None:
        super().__init__()
        self.num_spherical, self.num_radial, self.cutoff = num_spherical, num_radial, cutoff
        self.envelope = Envelope(envelope_exponent)
        zeros = spherical_bessel_zeros(num_spherical, num_radial)
        # ∫₀¹ j_l(z x)² x² dx = j_{l+1}(z)² / 2 at a zero z of j_l
        next_orders = np.arange(1, num_spherical + 1)[:, None]
        norms = 1.0 / np.sqrt(
            0.5 * special.spherical_jn(next_orders, zeros.astype(np.float64)) ** 2
        )
        dtype = torch.get_default_dtype()
        self.register_buffer("zeros", torch.tensor(zeros, dtype=dtype), persistent=False)
        self.register_buffer("norms", torch.tensor(norms, dtype=dtype), persistent=False)
        # float64, cast to the input's precision where used
        self.register_buffer("coefficients", series_coefficients(num_spherical), persistent=False)

    def forward(
        self, dist: torch.Tensor, angle: torch.Tensor, idx_kj: torch.Tensor
    ) -> torch.Tensor:
        x = dist / self.cutoff
        z = x[:, None, None] * self.zeros  # [edges, l, n]
        radial = spherical_bessel(z, self.coefficients)
        radial = self.envelope(x)[:, None, None] * self.norms * radial
        angular = zonal_harmonics(self.num_spherical, angle)  # [triplets, l]
        return (radial[idx_kj] * angular[..., None]).flatten(1)
