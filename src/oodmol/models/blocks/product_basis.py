"""MACE's equivariant product basis (Batatia et al., NeurIPS 2022, eqs. 10-11): from the
atomic basis A_i (per channel c, the irreps of the one-particle basis) to the symmetric
ν-fold products B_i = Σ_ν Σ_k w^ν_{z_i,k,c} U^ν_k · A^{⊗ν}_i for ν = 1 … correlation,
one output irrep L at a time, with weights per element z_i and channel c.

The coupling matrices U^ν (generalised Clebsch-Gordan coefficients) are built as
mace-torch's `tools/cg.py` builds them, so that the weights index the same paths in the
same order: every way of coupling ν copies of the input irreps one after the other
(e3nn's real Wigner 3j symbols, "component" normalisation), the paths of each
intermediate stage ordered by their irrep, and of the final stage those that end in L.
They are computed once in float64 and cast to the features' dtype when used.
"""

from __future__ import annotations

import torch
from e3nn import o3
from torch import nn


def coupling_paths(irreps: o3.Irreps, correlation: int) -> list[tuple[o3.Irrep, torch.Tensor]]:
    """Every coupling path of `correlation` copies of `irreps` (multiplicity-one irreps):
    (the irrep it ends in, its coefficients [2L+1, dim, …, dim] in float64), the paths
    of each stage sorted (stably) by irrep."""
    eye = torch.eye(irreps.dim, dtype=torch.float64)
    paths = [(ir, eye[s]) for ir, s in zip((ir for _, ir in irreps), irreps.slices(), strict=True)]
    for stage in range(1, correlation):
        coupled = []
        for ir_left, c_left in paths:
            for ir_right, s in zip((ir for _, ir in irreps), irreps.slices(), strict=True):
                for ir_out in ir_left * ir_right:
                    w3j = o3.wigner_3j(ir_out.l, ir_left.l, ir_right.l, dtype=torch.float64)
                    w3j = w3j * ir_out.dim**0.5
                    c = torch.einsum("jk,ijl->ikl", c_left.flatten(1), w3j)
                    full = c.new_zeros(ir_out.dim, *[irreps.dim] * stage, irreps.dim)
                    full[..., s] = c.reshape(ir_out.dim, *[irreps.dim] * stage, ir_right.dim)
                    coupled.append((ir_out, full))
        paths = sorted(coupled, key=lambda path: path[0])
    return paths


def coupling_matrix(irreps: o3.Irreps, irrep_out: o3.Irrep, correlation: int) -> torch.Tensor:
    """U^ν for one output irrep: [2L+1, dim × ν, paths] with the leading 1 dropped for
    L = 0 (mace-torch's `U_matrix_real` shapes); zeros with one path if none exists."""
    chosen = [c for ir, c in coupling_paths(irreps, correlation) if ir == irrep_out]
    if not chosen:
        shape = [irreps.dim] * correlation + [1]
        return torch.zeros([irrep_out.dim, *shape] if irrep_out.dim > 1 else shape)
    return torch.stack([c.squeeze(0) if irrep_out.dim == 1 else c for c in chosen], dim=-1)


class Contraction(nn.Module):
    """The product basis of one output irrep L: weights `weights_max` [elements, paths,
    channels] for the highest order and `weights[k]` for the orders below it, highest
    first (mace-torch's names)."""

    def __init__(
        self, irreps_in: o3.Irreps, irrep_out: o3.Irrep, correlation: int, num_elements: int
    ) -> None:
        super().__init__()
        self.correlation = correlation
        self.num_features = irreps_in.count((0, 1))
        coupling = o3.Irreps([ir for _, ir in irreps_in])
        for nu in range(1, correlation + 1):
            u = coupling_matrix(coupling, irrep_out, nu)
            self.register_buffer(f"U_matrix_{nu}", u, persistent=False)

        def weights(nu: int) -> nn.Parameter:
            paths = getattr(self, f"U_matrix_{nu}").shape[-1]
            return nn.Parameter(torch.randn(num_elements, paths, self.num_features) / paths)

        self.weights_max = weights(correlation)
        self.weights = nn.ParameterList([weights(nu) for nu in range(correlation - 1, 0, -1)])

    def forward(self, x: torch.Tensor, elements: torch.Tensor) -> torch.Tensor:
        """x [N, channels, dim] (the atomic basis), elements [N, n_elements] one-hot;
        returns [N, channels × (2L+1)] (channel-major, e3nn's layout).

        Each order contracts the ν-th tensor power of x (symmetric, so the order of its
        indices does not matter) with U^ν in one matrix product, then sums the paths with
        the atom's element weights: memory grows as dim^ν, fine for MACE's ν ≤ 3."""
        n, channels, dim = x.shape
        power, out = x, 0
        for nu in range(1, self.correlation + 1):
            if nu > 1:
                power = (power.unsqueeze(-1) * x.unsqueeze(-2)).flatten(-2)
            u = getattr(self, f"U_matrix_{nu}").to(x.dtype)
            paths = u.shape[-1]
            u = u.reshape(-1, dim**nu, paths)  # [2L+1, dim^ν, paths]
            basis = torch.einsum("bcj,mjk->bcmk", power, u)
            w = self.order_weights(nu)
            per_atom = (elements @ w.flatten(1)).view(n, paths, channels)
            out = out + (basis * per_atom.transpose(1, 2).unsqueeze(2)).sum(-1)
        return out.reshape(n, -1)

    def order_weights(self, nu: int) -> nn.Parameter:
        """w^ν [elements, paths, channels]."""
        return (
            self.weights_max if nu == self.correlation else self.weights[self.correlation - 1 - nu]
        )


class SymmetricContraction(nn.Module):
    """One `Contraction` per output irrep, concatenated (irreps_out, e.g. 256x0e+256x1o)."""

    def __init__(
        self, irreps_in: o3.Irreps, irreps_out: o3.Irreps, correlation: int, num_elements: int
    ) -> None:
        super().__init__()
        self.contractions = nn.ModuleList(
            Contraction(irreps_in, ir, correlation, num_elements) for _, ir in irreps_out
        )

    def forward(self, x: torch.Tensor, elements: torch.Tensor) -> torch.Tensor:
        return torch.cat([c(x, elements) for c in self.contractions], dim=-1)
