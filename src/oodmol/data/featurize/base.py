"""The featuriser contract: a picklable callable from one molecule to named arrays."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from rdkit import Chem

from oodmol.data.limits import (
    MAX_ATOMS,
    MAX_SMILES_LENGTH,
    TIME_LIMIT,
    atom_count,
    length_problem,
    seconds,
    size_problem,
)
from oodmol.data.table import MoleculeTable


@dataclass(frozen=True)
class MolInput:
    """What a featuriser may see of one molecule: its canonical SMILES and, for 3D data
    sets, its atoms and coordinates (Ångström) in the data set's own atom order."""

    smiles: str
    atomic_numbers: np.ndarray | None = None
    coords: np.ndarray | None = None
    # why the input a featuriser builds on is missing (no conformer in the cache it reads)
    problem: str | None = None


class FeaturizationError(ValueError):
    """A molecule this featuriser cannot represent (e.g. no 3D conformer could be made).

    The feature cache records it by mol_id with its message instead of failing the build,
    and runs that read this cache leave the molecule out, reported by name and count;
    any other exception stops the build."""


class Featurizer(ABC):
    """Maps one molecule to a dict of arrays (e.g. `x`; graphs add `edge_index`, `pos`).

    Arrays may differ in shape between molecules and may be of any fixed-size numeric
    dtype. Instances run in worker processes, so they must pickle: keep constructor
    arguments to plain values (Hydra builds them from YAML) and create unpicklable
    RDKit objects lazily inside `__call__`.
    """

    name: ClassVar[str]
    # Seconds one molecule may take (None: no limit). RDKit's C++ code cannot be stopped
    # from Python, so the feature cache's build enforces it from outside: it kills the
    # worker process of a molecule that overruns it and records the molecule as refused.
    time_limit: float | None = None

    @abstractmethod
    def params(self) -> dict:
        """Everything that changes the output, library versions included (JSON values);
        it keys the feature cache, so a change here means a rebuild."""

    @abstractmethod
    def __call__(self, mol: MolInput) -> dict[str, np.ndarray]:
        """Features of one molecule."""

    beside_graph = False  # of a joined one: whether its first part is a graph

    def joins(self) -> list[Featurizer]:
        """The featurisers whose vectors this one sets side by side, each read from its own
        cache (`oodmol.data.featurize.joined`); none for a featuriser of its own."""
        return []

    def built_on(self) -> Featurizer | None:
        """The featuriser whose cache this one reads instead of the data set's own
        geometry (the 3D representations: the conformers the 3D models use), or None."""
        return None

    def input_from(
        self, smiles: str, arrays: dict[str, np.ndarray] | None, refused: str | None
    ) -> MolInput:
        """What this featuriser sees of one molecule, given what `built_on`'s cache
        holds for it: its `arrays`, or the reason it `refused` the molecule."""
        raise NotImplementedError(f"{self.name} is built on no other featuriser's cache")


class LimitedFeaturizer(Featurizer):
    """A featuriser with limits on each molecule (`oodmol.data.limits`): a SMILES over
    `max_smiles_length` characters or a molecule of more than `max_atoms` atoms (heavy
    atoms, or with their hydrogens where the featuriser's work adds them) is refused
    before any expensive work (`parse`, `check_size`), and one that takes over
    `time_limit` seconds (None: no limit) by the feature cache's build. The cache records
    every refused molecule with the reason; the limits decide which molecules it holds,
    so they are part of `params()` (`limit_params`).

    A subclass whose work grows faster than its neighbours' with size states its own
    defaults; the others take these."""

    def __init__(
        self,
        max_smiles_length: int = MAX_SMILES_LENGTH,
        max_atoms: int = MAX_ATOMS,
        time_limit: float | None = TIME_LIMIT,
    ) -> None:
        self.max_smiles_length = max_smiles_length
        self.max_atoms = max_atoms
        self.time_limit = seconds(time_limit)

    def limit_params(self) -> dict:
        """The limits, as `params()` records them (they key the feature cache)."""
        return {
            "max_smiles_length": self.max_smiles_length,
            "max_atoms": self.max_atoms,
            "time_limit": self.time_limit,
        }

    def parse(self, smiles: str, hydrogens: bool = False) -> Chem.Mol | None:
        """RDKit's molecule of `smiles`, or None where RDKit cannot parse it; a SMILES
        over `max_smiles_length` (checked before RDKit reads it) or a molecule of more
        than `max_atoms` atoms (heavy atoms, or with their `hydrogens`) raises
        `FeaturizationError`."""
        problem = length_problem(smiles, self.max_smiles_length)
        if problem:
            raise FeaturizationError(problem)
        rd_mol = Chem.MolFromSmiles(smiles)
        if rd_mol is not None:
            self.check_size(atom_count(rd_mol, hydrogens), hydrogens)
        return rd_mol

    def check_size(self, n_atoms: int, hydrogens: bool = False) -> None:
        """Raise `FeaturizationError` for a molecule of more than `max_atoms` atoms
        (`n_atoms` heavy atoms, or all atoms with `hydrogens`)."""
        problem = size_problem(n_atoms, self.max_atoms, hydrogens)
        if problem:
            raise FeaturizationError(problem)


def inputs_of(table: MoleculeTable, rows: np.ndarray) -> list[MolInput]:
    """Featuriser inputs for the given row positions of a table (geometry when present)."""
    inputs = []
    for r in np.asarray(rows, dtype=np.int64):
        smiles = str(table.smiles[r])
        if table.geometry is None:
            inputs.append(MolInput(smiles))
        else:
            atomic_numbers, coords = table.geometry.molecule(r)
            inputs.append(MolInput(smiles, atomic_numbers, coords))
    return inputs
