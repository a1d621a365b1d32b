"""PaiNN, the polarizable atom interaction neural network (Schütt, Unke & Gastegger,
"Equivariant message passing for the prediction of tensorial properties and molecular
spectra", ICML 2021), written from the paper with schnetpack's `representation/painn.py`
read for the details; this is our own code.

Every atom carries F scalar features s_i and F vector features v_i (each a 3-vector, so
v is [N, 3, F]), starting from an element embedding and zero vectors. Each of the
interaction blocks is a message step then an update step, both residual:

- message: for neighbours j within the cutoff, φ(s_j) (Linear → SiLU → Linear to 3F) is
  multiplied by a filter W(r_ij) (a Linear map of 20 radial basis functions
  sin(nπ r/r_c)/r, times a cosine cutoff at r_c = 5 Å) and split into three parts,
  Δs_i = Σ_j a_ij, Δv_i = Σ_j b_ij ∘ v_j + c_ij ∘ r̂_ij;
- update: two bias-free channel mixes U v and V v; an MLP (Linear → SiLU → Linear) of
  [s ‖ |V v|] gives a_vv, a_sv, a_ss, and Δv = a_vv ∘ U v, Δs = a_sv ∘ ⟨U v, V v⟩ + a_ss.

Scalars depend on the geometry only through distances, norms and dot products of polar
vectors, so the output is invariant under rotations, reflections, translations and atom
permutations (O(3), not only SO(3)); the vectors rotate (and reflect) with the molecule.

Readout, two options:
- scalar properties (the default): the paper's per-atom MLP F → F/2 → 1 summed (or
  averaged) over the molecule. The backbone returns the F/2 hidden units after SiLU;
  the shared readout pools them (sum for extensive, mean for intensive tasks) and the
  shared head is the last Linear, so its bias is added once per molecule, not per atom.
- `dipole=True`: the paper's dipole moment (eq. 13), |Σ_i q_i r_i + μ_i| from per-atom
  charges (made neutral) and atomic dipoles (`oodmol.models.dipole`), one value per
  molecule ([B, 1], `out_dim = 1`); the shared head is then an affine map of |μ| on
  standardised targets (it learns the scale from e·Å to the target's unit).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch_geometric.utils import scatter

from oodmol.data.batches import PointCloudBatch
from oodmol.models.dipole import DipoleReadout, vector_norm
from oodmol.models.neighbors import radius_graph


def cosine_cutoff(r: torch.Tensor, cutoff: float) -> torch.Tensor:
    """Behler's cutoff ½(cos(π r / r_c) + 1), zero from r_c on."""
    return 0.5 * (torch.cos(r * math.pi / cutoff) + 1.0) * (r < cutoff).to(r.dtype)


class SineBasis(nn.Module):
    """sin(nπ r / r_c) / r for n = 1 … K (the paper's radial basis, DimeNet's
    zeroth-order Bessel functions without their normalisation)."""

    def __init__(self, num_rbf: int, cutoff: float) -> None:
        super().__init__()
        self.register_buffer("frequencies", torch.arange(1, num_rbf + 1) * math.pi / cutoff)

    def forward(self, r: torch.Tensor) -> torch.Tensor:
        return torch.sin(r.unsqueeze(-1) * self.frequencies) / r.unsqueeze(-1)


class Message(nn.Module):
    """The message step: continuous-filter convolution of φ(s_j) and of v_j, plus a new
    vector along the bond direction."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.hidden = hidden
        self.phi = nn.Sequential(
            nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, 3 * hidden)
        )

    def forward(
        self,
        s: torch.Tensor,
        v: torch.Tensor,
        edge_index: torch.Tensor,
        filters: torch.Tensor,
        direction: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        j, i = edge_index
        a, b, c = torch.split(self.phi(s)[j] * filters, self.hidden, dim=-1)
        dv = b.unsqueeze(1) * v[j] + c.unsqueeze(1) * direction.unsqueeze(-1)
        n = s.shape[0]
        ds = scatter(a, i, dim=0, dim_size=n, reduce="sum")
        return s + ds, v + scatter(dv, i, dim=0, dim_size=n, reduce="sum")


class Update(nn.Module):
    """The update step: atom-wise coupling of the scalar and vector channels."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.hidden = hidden
        self.mix = nn.Linear(hidden, 2 * hidden, bias=False)  # U and V
        self.net = nn.Sequential(
            nn.Linear(2 * hidden, hidden), nn.SiLU(), nn.Linear(hidden, 3 * hidden)
        )

    def forward(self, s: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        uv, vv = torch.split(self.mix(v), self.hidden, dim=-1)
        a_vv, a_sv, a_ss = torch.split(
            self.net(torch.cat([s, vector_norm(vv)], dim=-1)), self.hidden, dim=-1
        )
        return s + a_sv * (uv * vv).sum(1) + a_ss, v + a_vv.unsqueeze(1) * uv


class PaiNN(nn.Module):
    """PaiNN on point clouds (`z`, `pos`, `batch`); per-atom vectors for the shared readout,
    or |μ| per molecule with `dipole=True` (see the module docstring).

    `max_neighbors` caps each atom's neighbour list (the nearest are kept); schnetpack
    uses every pair within the cutoff, and the default is far above the number of atoms
    within 5 Å in organic molecules, so the cap does not bind there.
    """

    def __init__(
        self,
        hidden: int = 128,
        layers: int = 3,
        num_rbf: int = 20,
        cutoff: float = 5.0,
        max_neighbors: int = 128,
        max_z: int = 100,
        dipole: bool = False,
    ) -> None:
        super().__init__()
        self.hidden = hidden
        self.cutoff = cutoff
        self.max_neighbors = max_neighbors
        self.embedding = nn.Embedding(max_z, hidden)
        self.rbf = SineBasis(num_rbf, cutoff)
        # one filter network per block, computed in one matrix product (as schnetpack)
        self.filters = nn.Linear(num_rbf, layers * 3 * hidden)
        self.messages = nn.ModuleList(Message(hidden) for _ in range(layers))
        self.updates = nn.ModuleList(Update(hidden) for _ in range(layers))
        if dipole:
            self.dipole = DipoleReadout(hidden)
            self.out_dim = 1
        else:
            self.dipole = None
            self.output = nn.Sequential(nn.Linear(hidden, hidden // 2), nn.SiLU())
            self.out_dim = hidden // 2
        for module in self.modules():  # schnetpack's Dense initialisation
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    def embed(self, batch: PointCloudBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """Scalar [N, F] and vector [N, 3, F] atom features after the interaction blocks."""
        z, pos = batch.z, batch.pos
        edge_index = radius_graph(pos, batch.molecule, self.cutoff, self.max_neighbors)
        j, i = edge_index
        offset = pos[j] - pos[i]
        r = torch.linalg.vector_norm(offset, dim=-1)
        filters = self.filters(self.rbf(r)) * cosine_cutoff(r, self.cutoff).unsqueeze(-1)
        filters = torch.split(filters, 3 * self.hidden, dim=-1)
        direction = offset / r.unsqueeze(-1)
        s = self.embedding(z)
        v = s.new_zeros(s.shape[0], 3, self.hidden)
        for message, update, w in zip(self.messages, self.updates, filters, strict=True):
            s, v = message(s, v, edge_index, w, direction)
            s, v = update(s, v)
        return s, v

    def dipole_vector(self, batch: PointCloudBatch) -> torch.Tensor:
        """The predicted dipole vectors μ [B, 3] (`dipole=True` only)."""
        s, v = self.embed(batch)
        return self.dipole.vector(s, v, batch.pos, batch.molecule, len(batch))

    def forward(self, batch: PointCloudBatch) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        s, v = self.embed(batch)
        if self.dipole is not None:
            return self.dipole(s, v, batch.pos, batch.molecule, len(batch))
        return self.output(s), batch.molecule
