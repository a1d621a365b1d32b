"""Output modules of the 3D backbones (after TorchMD-Net's `output_modules.py`): from
per-atom features to what the shared readout and head take.

A backbone built on `AtomFeatureBackbone` computes per-atom scalar features s [N, F] and,
if it is equivariant, vector features v [N, 3, F] (its `embed`); its `output` is one of

- `ScalarOutput`: TorchMD-Net's `Scalar`, the per-atom MLP F → F/2 → 1 summed or averaged
  over the molecule, ending before its last Linear. That Linear is the shared head,
  applied after the task's readout (sum for extensive, mean for intensive tasks): a
  linear map commutes with both, so only its bias moves, from once per atom to once per
  molecule;
- `ChargeDipoleOutput` (scalar features only) or `EquivariantDipoleOutput` (scalar and
  vector features): the dipole moment's length |μ| per molecule, [B, 1]; the shared head is
  then an affine map of |μ| on standardised targets (it learns the scale from e·Å to
  the target's unit).

`MessagePassingBackbone` adds what the message-passing ones (PaiNN, the ET, GotenNet)
share: their width and their neighbour graph's cutoff, cap and self-loops.

The dipole is the physical readout (PaiNN, Schütt, Unke & Gastegger, ICML 2021, eq. 13):
μ = Σ_i q_i r_i + Σ_i μ_i from per-atom partial charges q_i and, with vector features,
atomic dipoles μ_i. The charges are made neutral per molecule (each molecule's mean
charge is subtracted, schnetpack's `correct_charges` for a neutral molecule), so μ does
not depend on where the origin is; TorchMD-Net keeps unconstrained charges and measures
r_i from the centre of mass instead, which makes μ origin-free too but lets the model
invent a net charge. |μ| is invariant under rotations and reflections; μ rotates with
the molecule.
"""

from __future__ import annotations

import torch
from torch import nn
from torch_geometric.utils import scatter

from oodmol.data.batches import PointCloudBatch
from oodmol.models.blocks.distance import Distance
from oodmol.models.blocks.equivariant import GatedEquivariantBlock


def dipole_vector(
    charges: torch.Tensor,
    pos: torch.Tensor,
    segment: torch.Tensor,
    n_molecules: int,
    atomic_dipoles: torch.Tensor | None = None,
) -> torch.Tensor:
    """μ = Σ_i (q_i − q̄) r_i (+ Σ_i μ_i) per molecule, [B, 3]: charges [N] are made
    neutral by subtracting their molecule's mean q̄; atomic dipoles are [N, 3]."""
    mean_charge = scatter(charges, segment, dim=0, dim_size=n_molecules, reduce="mean")
    per_atom = (charges - mean_charge[segment]).unsqueeze(-1) * pos
    if atomic_dipoles is not None:
        per_atom = per_atom + atomic_dipoles
    return scatter(per_atom, segment, dim=0, dim_size=n_molecules, reduce="sum")


class ScalarOutput(nn.Module):
    """Per-atom Linear F → `width` (F/2 unless given; GotenNet's head keeps F) and SiLU;
    returns those vectors and each atom's molecule for the shared readout and head (see
    the module docstring)."""

    def __init__(self, hidden: int, width: int | None = None) -> None:
        super().__init__()
        self.out_dim = hidden // 2 if width is None else width
        self.mlp = nn.Sequential(nn.Linear(hidden, self.out_dim), nn.SiLU())

    def forward(
        self, s: torch.Tensor, v: torch.Tensor | None, batch: PointCloudBatch
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.mlp(s), batch.molecule


class DipoleOutput(nn.Module):
    """|μ| per molecule, [B, 1], from per-atom terms that each subclass computes from the
    atom features (`atom_terms`): partial charges and, with vector features, atomic
    dipoles."""

    out_dim = 1

    def atom_terms(
        self, s: torch.Tensor, v: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Partial charges q [N] and atomic dipoles μ_i [N, 3] (None: charges only)."""
        raise NotImplementedError

    def vector(
        self, s: torch.Tensor, v: torch.Tensor | None, batch: PointCloudBatch
    ) -> torch.Tensor:
        """The dipole vectors μ [B, 3] (equivariant: they rotate with the molecule)."""
        charges, atomic_dipoles = self.atom_terms(s, v)
        return dipole_vector(charges, batch.pos, batch.molecule, len(batch), atomic_dipoles)

    def forward(
        self, s: torch.Tensor, v: torch.Tensor | None, batch: PointCloudBatch
    ) -> torch.Tensor:
        return torch.linalg.vector_norm(self.vector(s, v, batch), dim=-1, keepdim=True)


class ChargeDipoleOutput(DipoleOutput):
    """μ = Σ_i q_i r_i from charges alone, q_i from the per-atom MLP F → F/2 → 1
    (TorchMD-Net's `DipoleMoment`): for backbones without vector features."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.charges = nn.Sequential(
            nn.Linear(hidden, hidden // 2), nn.SiLU(), nn.Linear(hidden // 2, 1)
        )

    def atom_terms(self, s: torch.Tensor, v: torch.Tensor | None) -> tuple[torch.Tensor, None]:
        return self.charges(s).squeeze(-1), None


class EquivariantDipoleOutput(DipoleOutput):
    """μ = Σ_i q_i r_i + μ_i: two gated equivariant blocks F → F/2 → 1 (schnetpack's and
    TorchMD-Net's `EquivariantDipoleMoment` widths) give q_i (the scalar output) and μ_i
    (the vector output), as PaiNN and the ET use them."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            [
                GatedEquivariantBlock(hidden, hidden // 2, hidden, scalar_activation=True),
                GatedEquivariantBlock(hidden // 2, 1, hidden // 2),
            ]
        )

    def atom_terms(self, s: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        for block in self.blocks:
            s, v = block(s, v)
        return s.squeeze(-1), v.squeeze(-1)


class AtomFeatureBackbone(nn.Module):
    """A 3D backbone that computes per-atom features (`embed`) and reads them out with its
    `output` module: `(per-atom vectors, molecule)` for the shared readout, or |μ| [B, 1].
    """

    output: ScalarOutput | DipoleOutput

    def embed(self, batch: PointCloudBatch) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Scalar [N, F] and vector [N, 3, F] (or None) atom features."""
        raise NotImplementedError

    @property
    def out_dim(self) -> int:
        """The width of what `forward` returns per atom or molecule (the head's input)."""
        return self.output.out_dim

    def forward(self, batch: PointCloudBatch) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        return self.output(*self.embed(batch), batch)

    def dipole_vector(self, batch: PointCloudBatch) -> torch.Tensor:
        """The predicted dipole vectors μ [B, 3] (dipole outputs only)."""
        return self.output.vector(*self.embed(batch), batch)


class MessagePassingBackbone(AtomFeatureBackbone):
    """An `AtomFeatureBackbone` whose atom features, of width `hidden`, pass messages over
    the neighbour graph within `cutoff` (`distance`: at most `max_neighbors` nearest per
    atom, None for all, and with `loop` a self-loop each on top)."""

    def __init__(
        self, hidden: int, cutoff: float, max_neighbors: int | None, loop: bool = False
    ) -> None:
        super().__init__()
        self.hidden = hidden
        self.cutoff = cutoff
        self.max_neighbors = max_neighbors
        self.distance = Distance(cutoff, max_neighbors, loop)
