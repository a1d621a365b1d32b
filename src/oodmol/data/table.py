"""The validated molecule table every split, featuriser and model reads."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Geometry:
    """Flat per-atom arrays of all molecules; molecule i owns atoms offsets[i]:offsets[i+1].

    Flat arrays rather than a list of small arrays so that a table of 130k molecules
    opens, slices and hashes in milliseconds.
    """

    atomic_numbers: np.ndarray  # (n_atoms_total,) int8
    coords: np.ndarray  # (n_atoms_total, 3) float32, Ångström
    offsets: np.ndarray  # (n_molecules + 1,) int64

    def molecule(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = self.offsets[i], self.offsets[i + 1]
        return self.atomic_numbers[lo:hi], self.coords[lo:hi]

    def take(self, rows: np.ndarray) -> Geometry:
        counts = np.diff(self.offsets)[rows]
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        shift = np.repeat(self.offsets[rows] - offsets[:-1], counts)
        atom_rows = np.arange(offsets[-1], dtype=np.int64) + shift
        return Geometry(self.atomic_numbers[atom_rows], self.coords[atom_rows], offsets)


@dataclass(frozen=True)
class MoleculeTable:
    """Molecules of one data set after validation: ids, canonical SMILES, targets, geometry.

    `mol_id` is the data set's own stable identifier (QM9's index, the row number of a
    CSV file), so splits and predictions can always be traced back to the source.
    """

    name: str
    mol_id: np.ndarray  # (n,) int64, unique
    smiles: np.ndarray  # (n,) str, RDKit canonical SMILES
    targets: dict[str, np.ndarray]  # column -> (n,) float64
    geometry: Geometry | None = None
    version: str = field(default="")

    def __post_init__(self) -> None:
        n = len(self.mol_id)
        if len(self.smiles) != n or any(len(v) != n for v in self.targets.values()):
            raise ValueError(f"table {self.name!r}: columns have different lengths")
        if len(np.unique(self.mol_id)) != n:
            raise ValueError(f"table {self.name!r}: mol_id values are not unique")
        if self.geometry is not None and len(self.geometry.offsets) != n + 1:
            raise ValueError(f"table {self.name!r}: geometry does not match molecule count")
        if not self.version:
            object.__setattr__(self, "version", self.content_hash())

    def __len__(self) -> int:
        return len(self.mol_id)

    def content_hash(self) -> str:
        """Hash of everything a model can see, so splits notice any change."""
        h = hashlib.sha256(self.structure_hash().encode())
        for column in sorted(self.targets):
            h.update(column.encode())
            h.update(np.ascontiguousarray(self.targets[column], dtype=np.float64).tobytes())
        return h.hexdigest()[:16]

    def structure_hash(self) -> str:
        """Hash of the molecules alone (no targets): features belong to molecules, so
        every task of a data set shares one feature cache keyed by this."""
        h = hashlib.sha256()
        h.update(np.ascontiguousarray(self.mol_id, dtype=np.int64).tobytes())
        h.update("\n".join(self.smiles.tolist()).encode())
        if self.geometry is not None:
            h.update(np.ascontiguousarray(self.geometry.atomic_numbers).tobytes())
            h.update(np.ascontiguousarray(self.geometry.coords).tobytes())
            h.update(np.ascontiguousarray(self.geometry.offsets).tobytes())
        return h.hexdigest()[:16]

    def take(self, rows: np.ndarray, name: str | None = None) -> MoleculeTable:
        """A sub-table of the given row positions (order kept)."""
        rows = np.asarray(rows, dtype=np.int64)
        return MoleculeTable(
            name=name or self.name,
            mol_id=self.mol_id[rows],
            smiles=self.smiles[rows],
            targets={k: v[rows] for k, v in self.targets.items()},
            geometry=None if self.geometry is None else self.geometry.take(rows),
        )

    def rows_of(self, mol_ids: np.ndarray) -> np.ndarray:
        """Row positions of the given molecule ids; raises naming ids that are absent."""
        order = np.argsort(self.mol_id)
        pos = np.searchsorted(self.mol_id, mol_ids, sorter=order)
        pos = np.clip(pos, 0, len(order) - 1)
        rows = order[pos]
        missing = self.mol_id[rows] != mol_ids
        if missing.any():
            bad = np.asarray(mol_ids)[missing]
            raise KeyError(
                f"{missing.sum()} molecule ids not in table {self.name!r}: {bad[:10].tolist()}"
            )
        return rows
