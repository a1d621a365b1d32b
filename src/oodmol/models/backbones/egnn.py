"""BOOM's E(3)-equivariant 3D GNN (EGNN): the IGNN's blocks, with the atoms moved along
their bonds between blocks.

Follows BOOM's `EquivariantGNN` (experiments/gnn-ablation/models.py in FLASK-LLNL/BOOM,
read for its architecture; this is our own code): hidden 64, three blocks of two
sublayers each (`ignn.InvariantBlock`: bond GCL + distance-weighted pair sum + layer
norm), and after every block the coordinate update of BOOM's `EquivariantBlock`

    x_i ← x_i + Σ_{j bonded to i} (x_i − x_j) / ((r_ij + 1) r_ij²),
    r_ij = (|x_i − x_j|² + 10⁻⁸)^½,

so the next block's pair weights see the moved atoms. The update is a sum of difference
vectors scaled by distances, hence E(3)-equivariant (rotations, reflections,
translations), and the atom vectors, which read the coordinates only through distances,
are invariant.

Unlike the EGNN of Satorras et al. (2021) that BOOM's paper cites, BOOM's code learns no
coordinate function φ_x(m_ij) and does not feed |x_i − x_j|² into the edge MLP: its update
has no parameters and does not read the atom vectors, and distances reach the atom vectors
through the IGNN's pair sum. This module reproduces the code, which produced BOOM's
numbers. Other deviations are the IGNN's (`oodmol.models.backbones.ignn`): bonds perceived
from the input geometry (and kept while the atoms move), bond lengths as edge features,
an atomic-number embedding, the pair normaliser over the molecule's own atoms.
"""

from __future__ import annotations

import torch

from oodmol.models.backbones.ignn import IGNN


def bond_push(pos: torch.Tensor, bonds: torch.Tensor) -> torch.Tensor:
    """BOOM's coordinate update: each atom pushed away from its bonded neighbours by
    (x_i − x_j) / ((r_ij + 1) r_ij²), summed over the bonds j → i."""
    diff = pos[bonds[1]] - pos[bonds[0]]  # x_i − x_j for the edge j → i
    squared = diff.pow(2).sum(-1, keepdim=True) + 1e-8
    return pos.index_add(0, bonds[1], diff / ((squared.sqrt() + 1) * squared))


class EGNN(IGNN):
    """The IGNN with BOOM's equivariant defaults (3 blocks × 2 sublayers) and the bond push
    after each block; `encode` returns the moved coordinates with the atom vectors."""

    moves_atoms = True

    def __init__(
        self, hidden: int = 64, layers: int = 3, sublayers: int = 2, **settings: float | None
    ) -> None:
        """`settings`: the rest of the IGNN's (`cutoff`, `bond_factor`, `n_elements`)."""
        super().__init__(hidden, layers, sublayers, **settings)

    def move(self, pos: torch.Tensor, bonds: torch.Tensor) -> torch.Tensor:
        return bond_push(pos, bonds)
