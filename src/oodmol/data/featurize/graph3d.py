"""Atoms in 3D: atomic numbers and coordinates, with hydrogens, for geometric models."""

from __future__ import annotations

import numpy as np
import rdkit

from oodmol.data.featurize.base import LimitedFeaturizer, MolInput
from oodmol.data.featurize.conformers import ConformerMethod, GeometryOptimizer, embed_mol

# Atoms with their hydrogens: ETKDG and MMFF grow faster than linearly with size (a chain
# of 450 atoms takes 14 s); 2.3x the data sets' largest (216 atoms).
MAX_ATOMS = 500
# Whole seconds for each of RDKit's two embeddings (ETKDG, then from random coordinates):
# 5x what the largest molecule allowed takes, so that this wall-clock limit changes the
# conformer of no molecule of ordinary size on a slower machine; the hard `TIME_LIMIT`
# lies above both embeddings and the force field.
EMBED_TIMEOUT = 60
TIME_LIMIT = 180.0


class Graph3D(LimitedFeaturizer):
    """A molecule as a point cloud: `z` int64 [n_atoms], `pos` float32 [n_atoms, 3] (Å),
    `fragment` int64 [n_atoms] (each atom's covalent fragment, so that bonds perceived
    from the geometry never join two fragments that the embedding placed on top of each
    other) and `conformer` int8 [2] (its `ConformerMethod`, and 1 if the force field
    converged). A given geometry is one fragment: its parts lie where they were measured.

    Data sets with geometries (QM9's DFT structures) use them as given; SMILES-only data
    sets get an ETKDG + MMFF94 conformer (`oodmol.data.featurize.conformers`), seeded,
    refined by `optimizer` where one is given (`conformers=xtb`: GFN2-xTB, whose energies,
    steps and start coordinates are stored beside `pos`). Like every feature cache's, its
    build keeps a journal, so a stopped build goes on where it stopped (`oodmol.data.store`).
    Neighbour graphs are built per batch by the models (their cutoffs differ), so the
    cache holds no edges.

    Limits (`LimitedFeaturizer`), wider here: `max_atoms` counts atoms with their
    hydrogens, checked before any embedding, and `time_limit` covers all of a molecule's
    work; `max_smiles_length` (in `limits`) has the common default. ETKDG gives up on an
    embedding after `embed_timeout` seconds (RDKit's own limit, 0: none).
    """

    name = "graph3d"

    def __init__(
        self,
        seed: int = 0,
        max_iterations: int = 0,
        embed_timeout: int = EMBED_TIMEOUT,
        max_atoms: int = MAX_ATOMS,
        time_limit: float | None = TIME_LIMIT,
        optimizer: GeometryOptimizer | None = None,
        **limits: int,
    ) -> None:
        super().__init__(max_atoms=max_atoms, time_limit=time_limit, **limits)
        self.seed = seed
        self.max_iterations = max_iterations
        self.embed_timeout = embed_timeout
        self.optimizer = optimizer

    def params(self) -> dict:
        # without an optimizer, exactly the keys of the ETKDG + MMFF caches built before
        # optimizers existed, so that those caches stay valid
        optimizer = {} if self.optimizer is None else {"optimizer": self.optimizer.params()}
        return {
            "version": 2,  # 2: the atoms' fragments
            "rdkit": rdkit.__version__,
            "conformers": "etkdgv3-random-coords/mmff94-uff",
            "seed": self.seed,
            "max_iterations": self.max_iterations,
            # with the limits, they decide which molecules the cache holds, and how
            "embed_timeout": self.embed_timeout,
            **self.limit_params(),
            **optimizer,
        }

    def __call__(self, mol: MolInput) -> dict[str, np.ndarray]:
        if mol.coords is not None:
            self.check_size(len(mol.atomic_numbers), hydrogens=True)
            return {
                "z": np.asarray(mol.atomic_numbers, dtype=np.int64),
                "pos": np.asarray(mol.coords, dtype=np.float32),
                "fragment": np.zeros(len(mol.atomic_numbers), dtype=np.int64),
                "conformer": np.array([ConformerMethod.GIVEN, 1], dtype=np.int8),
            }
        self.parse(mol.smiles, hydrogens=True)
        rd_mol, conformer = embed_mol(
            mol.smiles, self.seed, self.max_iterations, self.embed_timeout
        )
        arrays = {
            "z": conformer.atomic_numbers,
            "pos": conformer.positions,
            "fragment": conformer.fragment,
            "conformer": np.array([conformer.method, conformer.converged], dtype=np.int8),
        }
        if self.optimizer is not None:
            arrays.update(self.optimizer(rd_mol, conformer))
        return arrays
