"""Atoms in 3D: atomic numbers and coordinates, with hydrogens, for geometric models."""

from __future__ import annotations

import numpy as np
import rdkit

from oodmol.data.featurize.base import Featurizer, MolInput
from oodmol.data.featurize.conformers import ConformerMethod, embed


class Graph3D(Featurizer):
    """A molecule as a point cloud: `z` int64 [n_atoms], `pos` float32 [n_atoms, 3] (Å),
    `fragment` int64 [n_atoms] (each atom's covalent fragment, so that bonds perceived
    from the geometry never join two fragments that the embedding placed on top of each
    other) and `conformer` int8 [2] (its `ConformerMethod`, and 1 if the force field
    converged). A given geometry is one fragment: its parts lie where they were measured.

    Data sets with geometries (QM9's DFT structures) use them as given; SMILES-only data
    sets get an ETKDG + MMFF94 conformer (`oodmol.data.featurize.conformers`), seeded.
    Neighbour graphs are built per batch by the models (their cutoffs differ), so the
    cache holds no edges.
    """

    name = "graph3d"

    def __init__(self, seed: int = 0, max_iterations: int = 0) -> None:
        self.seed = seed
        self.max_iterations = max_iterations

    def params(self) -> dict:
        return {
            "version": 2,  # 2: the atoms' fragments
            "rdkit": rdkit.__version__,
            "conformers": "etkdgv3-random-coords/mmff94-uff",
            "seed": self.seed,
            "max_iterations": self.max_iterations,
        }

    def __call__(self, mol: MolInput) -> dict[str, np.ndarray]:
        if mol.coords is not None:
            return {
                "z": np.asarray(mol.atomic_numbers, dtype=np.int64),
                "pos": np.asarray(mol.coords, dtype=np.float32),
                "fragment": np.zeros(len(mol.atomic_numbers), dtype=np.int64),
                "conformer": np.array([ConformerMethod.GIVEN, 1], dtype=np.int8),
            }
        conformer = embed(mol.smiles, self.seed, self.max_iterations)
        return {
            "z": conformer.atomic_numbers,
            "pos": conformer.positions,
            "fragment": conformer.fragment,
            "conformer": np.array([conformer.method, conformer.converged], dtype=np.int8),
        }
