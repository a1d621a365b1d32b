"""How large one molecule may be, and how long its work may take.

Sizes are checked before any expensive work, so that a pathological input is refused in
milliseconds with the reason instead of crashing or stalling a run: a SMILES of 100,000
characters crashed RDKit, and RDKit's Ipc descriptors and ETKDG embedding grow faster
than linearly with the number of atoms (all descriptors of a chain of 400 carbons take
19 s, its conformer minutes). Time limits are enforced from outside the worker process
(`oodmol.parallel.process_map`), since RDKit's C++ code cannot be stopped from Python.

The defaults pass every molecule of the benchmark's data sets by a wide margin: their
longest SMILES has 267 characters (Lipophilicity; CSD 10k 174, QM9 28), their largest
molecule 115 heavy atoms (Lipophilicity; CSD 10k 100, QM9 9) and 216 atoms with its
hydrogens (Lipophilicity; CSD 10k 156, QM9 29). Validation takes its limits from the data
source's config (`limits`), each featuriser from its constructor (configs/featurizer/).
"""

from __future__ import annotations

from dataclasses import dataclass

from rdkit import Chem

MAX_SMILES_LENGTH = 2000  # characters, 7x the longest SMILES of the data sets
MAX_ATOMS = 1000  # heavy atoms, 9x the largest molecule of the data sets
TIME_LIMIT = 60.0  # seconds per molecule; parsing or a 2D featuriser takes milliseconds
_SHOWN = 80  # characters of a SMILES quoted in a message


def seconds(time_limit: float | None) -> float | None:
    """A time limit as a float, or None for none: YAML gives 60 where Python says 60.0,
    and the two must key one feature cache."""
    if time_limit is None:
        return None
    if time_limit <= 0:
        raise ValueError(f"time_limit={time_limit}: a time limit must be positive (null: none)")
    return float(time_limit)


@dataclass(frozen=True)
class MoleculeLimits:
    """The limits validation applies to each record: a SMILES longer than
    `max_smiles_length` is refused before RDKit reads it, a molecule of more than
    `max_atoms` heavy atoms before RDKit sanitises it, and one whose parsing runs past
    `time_limit` seconds (None: no limit) is refused by its worker process's end."""

    max_smiles_length: int = MAX_SMILES_LENGTH
    max_atoms: int = MAX_ATOMS
    time_limit: float | None = TIME_LIMIT

    def __post_init__(self) -> None:
        if self.max_smiles_length < 1 or self.max_atoms < 1:
            raise ValueError(f"{self}: the size limits must be at least 1")
        object.__setattr__(self, "time_limit", seconds(self.time_limit))


DEFAULT_LIMITS = MoleculeLimits()


def length_problem(smiles: str, max_smiles_length: int) -> str | None:
    """Why `smiles` is too long to be read, or None. Reasons name the limit, not the
    molecule's size, so that a report counts the molecules refused for each."""
    if len(smiles) <= max_smiles_length:
        return None
    return f"SMILES longer than max_smiles_length ({max_smiles_length} characters)"


def atom_count(mol: Chem.Mol, hydrogens: bool = False) -> int:
    """Heavy atoms of `mol` (it may be unsanitised), or all its atoms with their
    hydrogens (it must be sanitised), as the work that adds them will see them."""
    if hydrogens:
        return mol.GetNumAtoms() + sum(atom.GetTotalNumHs() for atom in mol.GetAtoms())
    return mol.GetNumHeavyAtoms()


def size_problem(n_atoms: int, max_atoms: int, hydrogens: bool = False) -> str | None:
    """Why a molecule of `n_atoms` (heavy atoms, or all atoms with `hydrogens`) is too
    large, or None."""
    if n_atoms <= max_atoms:
        return None
    counted = "atoms with hydrogens" if hydrogens else "heavy atoms"
    return f"more {counted} than max_atoms ({max_atoms})"


def shown(smiles: str) -> str:
    """A SMILES as a message quotes it: at most `_SHOWN` characters and its length."""
    if len(smiles) <= _SHOWN:
        return smiles
    return f"{smiles[:_SHOWN]}... ({len(smiles)} characters)"
