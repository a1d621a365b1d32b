"""3D conformers from SMILES as BOOM made them, with fallbacks that never drop silently.

BOOM (`boom/data/prepare_3D_mols.py`) embedded each molecule with hydrogens by RDKit's
default `EmbedMolecule` (ETKDG), unseeded, then ran `MMFFOptimizeMolecule` (MMFF94, at
most 200 iterations), and dropped molecules whose embedding raised. Here:

1. ETKDGv3 with a fixed seed (so the cache is reproducible);
2. if that finds no coordinates, the same from random starting coordinates;
3. MMFF94 optimisation, or UFF where MMFF94 has no parameters for the molecule (boron,
   selenium in some environments, metals); where neither has parameters the embedded
   geometry is kept unoptimised, as BOOM's code kept it (its MMFF call then fails
   without raising);
4. a molecule with no coordinates after step 2 raises `ConformerError`, which the
   feature cache records by mol_id and reason.

Every result says which route it took (`ConformerMethod`), so a cache can count them.

A `GeometryOptimizer` may refine that conformer further (`conformers=xtb`: GFN2-xTB,
`oodmol.data.featurize.xtb`); it is the contract a new geometry implements.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import IntEnum
from typing import ClassVar

import numpy as np
from rdkit import Chem
from rdkit.Chem import rdDistGeom, rdForceFieldHelpers

from oodmol.data.featurize.base import FeaturizationError

MMFF_MAX_ITERATIONS = 200  # RDKit's default, which BOOM used


class ConformerError(FeaturizationError):
    """No 3D coordinates could be made for a molecule."""


class ConformerMethod(IntEnum):
    """How a molecule got its coordinates (stored with them in the cache)."""

    GIVEN = 0  # from the data set (QM9's DFT geometries)
    ETKDG_MMFF = 1
    ETKDG_UFF = 2
    ETKDG_NO_FORCE_FIELD = 3
    RANDOM_MMFF = 4
    RANDOM_UFF = 5
    RANDOM_NO_FORCE_FIELD = 6

    @property
    def is_fallback(self) -> bool:
        return self not in (ConformerMethod.GIVEN, ConformerMethod.ETKDG_MMFF)


@dataclass(frozen=True)
class Conformer:
    atomic_numbers: np.ndarray  # int64 [n_atoms], hydrogens included
    positions: np.ndarray  # float32 [n_atoms, 3], Ångström
    method: ConformerMethod
    converged: bool  # the force field reached its tolerance within its iterations
    # the covalent fragment of each atom (salts, co-crystals: ETKDG may place fragments on
    # top of each other, so bonds must not be perceived from the geometry across them)
    fragment: np.ndarray  # int64 [n_atoms]


def embed(smiles: str, seed: int = 0, max_iterations: int = 0, timeout: int = 0) -> Conformer:
    """One optimised conformer of `smiles` with explicit hydrogens (see `embed_mol`)."""
    return embed_mol(smiles, seed, max_iterations, timeout)[1]


def embed_mol(
    smiles: str, seed: int = 0, max_iterations: int = 0, timeout: int = 0
) -> tuple[Chem.Mol, Conformer]:
    """RDKit's molecule of `smiles` with explicit hydrogens, and one optimised conformer
    of it in the same atom order.

    `max_iterations` is ETKDG's embedding-attempt budget (0: RDKit's default); tests
    lower it to force the fallbacks. `timeout` is RDKit's own limit on each of the two
    embeddings, in whole seconds (0: none): ETKDG gives up with no coordinates, and a
    molecule whose embedding both times out is refused without its worker being killed."""
    mol = Chem.MolFromSmiles(smiles)
    if mol is None:
        raise ConformerError(f"RDKit cannot parse {smiles!r}")
    mol = Chem.AddHs(mol)
    random_start = False
    if _embed(mol, seed, max_iterations, timeout, random_coords=False) < 0:
        random_start = True
        if _embed(mol, seed, max_iterations, timeout, random_coords=True) < 0:
            raise ConformerError("ETKDG embedding failed, also from random coordinates")
    force_field, converged = optimise_with_force_field(mol)
    method = ConformerMethod[f"{'RANDOM' if random_start else 'ETKDG'}_{force_field}"]
    positions = mol.GetConformer().GetPositions().astype(np.float32)
    if not np.isfinite(positions).all():
        raise ConformerError(f"{method.name} produced non-finite coordinates")
    atomic_numbers = np.array([a.GetAtomicNum() for a in mol.GetAtoms()], dtype=np.int64)
    fragment = np.zeros(len(atomic_numbers), dtype=np.int64)
    for index, atoms in enumerate(Chem.GetMolFrags(mol)):
        fragment[list(atoms)] = index
    return mol, Conformer(atomic_numbers, positions, method, converged, fragment)


def _embed(mol: Chem.Mol, seed: int, max_iterations: int, timeout: int, random_coords: bool) -> int:
    params = rdDistGeom.ETKDGv3()
    params.randomSeed = seed
    params.useRandomCoords = random_coords
    params.timeout = timeout
    if max_iterations:
        params.maxIterations = max_iterations
    return rdDistGeom.EmbedMolecule(mol, params)


def optimise_with_force_field(
    mol: Chem.Mol, max_iterations: int = MMFF_MAX_ITERATIONS
) -> tuple[str, bool]:
    """MMFF94, else UFF, else nothing, on `mol`'s conformer in place; returns the force
    field's name and whether it converged within `max_iterations`."""
    if rdForceFieldHelpers.MMFFHasAllMoleculeParams(mol):
        status = rdForceFieldHelpers.MMFFOptimizeMolecule(mol, maxIters=max_iterations)
        return "MMFF", status == 0
    if rdForceFieldHelpers.UFFHasAllMoleculeParams(mol):
        status = rdForceFieldHelpers.UFFOptimizeMolecule(mol, maxIters=max_iterations)
        return "UFF", status == 0
    return "NO_FORCE_FIELD", False


class GeometryOptimizer(ABC):
    """A second stage after the force field: it takes a molecule's conformer (ETKDG +
    MMFF94) and returns better coordinates, with whatever it measured on the way.

    Adding a geometry to the benchmark is one such class and one YAML file in
    configs/conformers/ naming it (`optimizer: {_target_: ...}`); the featuriser
    (`Graph3D`) and the feature cache know nothing more about it. Like a featuriser it
    runs in worker processes, so it must pickle: plain constructor values, heavy objects
    made inside `__call__`. It raises `FeaturizationError` (with the reason) for a
    molecule it cannot optimise; the cache records it by mol_id.
    """

    name: ClassVar[str]

    @abstractmethod
    def params(self) -> dict:
        """Everything that changes its output, library versions included (JSON values):
        part of the feature cache's key."""

    @abstractmethod
    def __call__(self, mol: Chem.Mol, start: Conformer) -> dict[str, np.ndarray]:
        """The optimised geometry of `mol` (RDKit's molecule with explicit hydrogens, in
        the conformer's atom order) from `start`: `pos` float32 [n_atoms, 3] in Ångström,
        and any further named arrays it records (energies, steps, ...)."""
