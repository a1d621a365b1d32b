"""A split: every molecule's role, persisted once and shared by every model."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from oodmol.bounded import read_json
from oodmol.data.table import MoleculeTable
from oodmol.errors import UserError
from oodmol.io import atomic_write_json

SETS = ("train", "val", "id", "ood")
# a set only some splits have (split.val=tail: a pseudo-OOD validation set cut from the
# training pool's KDE tails); a split without it has exactly the four sets and the hash
# it always had
VAL_TAIL = "val_tail"
ALL_SETS = (*SETS, VAL_TAIL)


class LeakageError(ValueError):
    """A structure appears in two sets of one split."""


class EmptySetError(UserError, ValueError):
    """A set of a split has no molecules: nothing to train on, to select a model on, or
    to score. Raised before any training, with every set's size and what to change."""

    def __init__(self, sizes: dict[str, int], what: str, remedy: str) -> None:
        empty = empty_sets(sizes)
        shown = ", ".join(f"{name} {n}" for name, n in sizes.items())
        named = " and ".join([", ".join(empty[:-1]), empty[-1]] if len(empty) > 1 else empty)
        verb = "sets are" if len(empty) > 1 else "set is"
        super().__init__(f"{what}: {shown}; the {named} {verb} empty; {remedy}")


def empty_sets(sizes: dict[str, int]) -> list[str]:
    return [name for name in ALL_SETS if name in sizes and sizes[name] == 0]


@dataclass(frozen=True)
class SplitAssignment:
    """Molecule ids per set; `info` records how the split was made (settings, sizes).
    Every split has the four SETS; VAL_TAIL only where the split made one."""

    sets: dict[str, np.ndarray]  # set name -> sorted int64 mol ids
    info: dict = field(default_factory=dict)

    @classmethod
    def from_roles(cls, mol_id: np.ndarray, roles: np.ndarray, info: dict) -> SplitAssignment:
        """From a role per molecule (an index into ALL_SETS; negative: in no set)."""
        sets = {
            name: np.sort(mol_id[roles == i]).astype(np.int64)
            for i, name in enumerate(ALL_SETS)
            if name in SETS or (roles == i).any()
        }
        return cls(sets, info)

    def names(self) -> list[str]:
        """The split's sets, in ALL_SETS order."""
        return [name for name in ALL_SETS if name in self.sets]

    @property
    def hash(self) -> str:
        """Content hash of the assignment; goes into every metrics.json."""
        h = hashlib.sha256()
        for name in self.names():
            h.update(name.encode())
            h.update(self.sets[name].tobytes())
        return h.hexdigest()[:16]

    def sizes(self) -> dict[str, int]:
        return {name: len(self.sets[name]) for name in self.names()}

    def role_of(self, mol_id: np.ndarray) -> np.ndarray:
        """Set name of each molecule id ('' if it is in no set)."""
        roles = np.full(len(mol_id), "", dtype=object)
        for name in self.names():
            roles[np.isin(mol_id, self.sets[name])] = name
        return roles

    def check_no_leakage(self, table: MoleculeTable) -> None:
        """No molecule, and no canonical SMILES, may be in two sets."""
        seen: dict[str, str] = {}
        clashes = []
        for name in self.names():
            for smiles in table.smiles[table.rows_of(self.sets[name])]:
                other = seen.setdefault(str(smiles), name)
                if other != name:
                    clashes.append(f"{smiles} ({other} and {name})")
        if clashes:
            raise LeakageError(
                f"{len(clashes)} structures are in two sets of the split: {clashes[:10]}"
            )

    def write(self, path: Path) -> None:
        payload = {
            "hash": self.hash,
            "info": self.info,
            "sets": {name: self.sets[name].tolist() for name in self.names()},
        }
        atomic_write_json(path, payload)

    @classmethod
    def read(cls, path: Path) -> SplitAssignment:
        """Read a split file, refusing one whose content does not match its hash, or
        whose parts the hash does not cover (the sets' names, `info`) are not what a
        split writes."""
        payload = read_json(path, "split file")
        sets, info = payload["sets"], payload["info"]
        if not isinstance(sets, dict) or not set(SETS) <= set(sets) <= set(ALL_SETS):
            raise ValueError(f"{path}: its sets are not the sets of a split")
        if not isinstance(info, dict):
            raise ValueError(f"{path}: its info is not a record of how the split was made")
        split = cls({k: np.asarray(v, dtype=np.int64) for k, v in sets.items()}, info)
        if split.hash != payload["hash"]:
            raise ValueError(f"{path}: content does not match its hash {payload['hash']}")
        return split
