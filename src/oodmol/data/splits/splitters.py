"""The three ways to split a task: BOOM's KDE tail (OOD), random, and scaffold."""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np
from rdkit import Chem, RDLogger
from rdkit.Chem.Scaffolds import MurckoScaffold

from oodmol.data.splits.assignment import ALL_SETS, EmptySetError, SplitAssignment, empty_sets
from oodmol.data.splits.kde import gaussian_kde_log_density, scott_bandwidth
from oodmol.data.table import MoleculeTable
from oodmol.names import check_name

TRAIN, VAL, ID, OOD, VAL_TAIL = range(len(ALL_SETS))
VALIDATION_RULES = ("random", "tail")


def resolve_size(size: int | float, n: int) -> int:
    """An absolute count, or a fraction of n when 0 < size < 1."""
    count = round(size * n) if isinstance(size, float) and 0 < size < 1 else int(size)
    if not 0 <= count <= n:
        raise ValueError(f"a set of {size} molecules cannot be taken from {n}")
    return count


class Splitter(ABC):
    """Assigns every molecule of a task table to train, val, id or ood.

    After the held-out set is chosen, the rest is split the same way everywhere: a
    seeded random `id_fraction` becomes the ID test set, `val_fraction` of what remains
    the validation set, the rest training. Randomness is drawn over molecules ordered by
    id, so the result does not depend on row order, process or platform.

    Two options change only the training set, never the test sets (both are left out of
    `settings`, hence of the split file's name, at their defaults):
    - `val="tail"` cuts a second validation set, `val_tail`, as large as `val`, from the
      training molecules by the OOD set's own rule: the lowest-density values of a
      Gaussian KDE (Scott's bandwidth) fitted on the training molecules' property alone,
      ties by smallest id. Runs select on it (`val_loss`) and still score `val`.
    - `subset=[fraction, repeat]` keeps a seeded `fraction` of the training molecules
      (learning curves): for one `repeat` the subsets are nested as the fraction grows,
      and each repeat draws its own order. The other training molecules are in no set.
    """

    name: str

    def __init__(
        self,
        ood_size: int | float,
        id_fraction: float = 0.05,
        val_fraction: float = 0.10,
        seed: int = 0,
        name: str | None = None,
        val: str = "random",
        subset: tuple[float, int] | None = None,
    ) -> None:
        self.name = check_name(name or self.name, "split.name")
        self.ood_size = ood_size
        self.id_fraction = id_fraction
        self.val_fraction = val_fraction
        self.seed = seed
        if val not in VALIDATION_RULES:
            raise ValueError(f"split.val must be one of {VALIDATION_RULES}, got {val!r}")
        self.val = val
        self.subset = None if subset is None else _checked_subset(subset)

    def settings(self) -> dict:
        extra = {"val": self.val} if self.val != "random" else {}
        if self.subset is not None:
            extra["subset"] = list(self.subset)
        return {
            "splitter": self.name,
            "ood_size": self.ood_size,
            "id_fraction": self.id_fraction,
            "val_fraction": self.val_fraction,
            "seed": self.seed,
            **extra,
        }

    def columns(self, target: str) -> tuple[str, ...]:
        """The data set's columns the split reads (the task's target, unless it says)."""
        return (target,)

    def split(self, table: MoleculeTable, target: str) -> SplitAssignment:
        order = np.argsort(table.mol_id, kind="stable")
        table = table.take(order)
        roles, info = self._roles(table, target)
        if self.val == "tail":
            info["val_tail"] = self._cut_tail_validation(roles, table, target)
        if self.subset is not None:
            info["subset"] = self._keep_training_subset(roles)
        info = {**self.settings(), **info}
        split = SplitAssignment.from_roles(table.mol_id, roles, info)
        split.info["sizes"] = split.sizes()
        if empty_sets(split.sizes()):
            what = f"the {self.name} split of {len(table)} molecules gives"
            raise EmptySetError(split.sizes(), what, self._remedy(empty_sets(split.sizes())))
        return split

    def _remedy(self, empty: list[str]) -> str:
        """Which setting makes each empty set non-empty (Hydra's names for them)."""
        change = {
            "train": (
                f"lower task.ood_size (now {self.ood_size}), split.id_fraction "
                f"(now {self.id_fraction}) or split.val_fraction (now {self.val_fraction})"
            ),
            "val": f"raise split.val_fraction (now {self.val_fraction})",
            "id": f"raise split.id_fraction (now {self.id_fraction})",
            "ood": f"raise task.ood_size (now {self.ood_size})",
        }
        return "; ".join(change[name] for name in empty) + "; or use more molecules"

    def _cut_tail_validation(self, roles: np.ndarray, table: MoleculeTable, target: str) -> dict:
        """Training molecules of lowest KDE density among the training molecules become
        VAL_TAIL, as many as VAL holds (the rule of the OOD set, on the pool alone)."""
        train = np.flatnonzero(roles == TRAIN)
        n_tail = int((roles == VAL).sum())
        if n_tail == 0 or n_tail >= len(train):
            raise ValueError(
                f"split.val=tail cuts a validation set as large as val ({n_tail}) from the "
                f"{len(train)} training molecules; change split.val_fraction "
                f"(now {self.val_fraction}) or use more molecules"
            )
        y = table.targets[self.columns(target)[0]][train]
        h = scott_bandwidth(len(y))
        log_density = gaussian_kde_log_density(y, h)
        ranked = np.lexsort((table.mol_id[train], log_density))
        roles[train[ranked[:n_tail]]] = VAL_TAIL
        tail_y = y[ranked[:n_tail]]
        return {
            "bandwidth_value": h,
            "log_density_cut": float(log_density[ranked[n_tail - 1]]),
            "target_range_kept": [
                float(np.min(np.delete(y, ranked[:n_tail]))),
                float(np.max(np.delete(y, ranked[:n_tail]))),
            ],
            "target_range_tail": [float(tail_y.min()), float(tail_y.max())],
        }

    def _keep_training_subset(self, roles: np.ndarray) -> dict:
        """The first `fraction` of the training molecules in the repeat's seeded order;
        the rest leaves every set."""
        fraction, repeat = self.subset
        train = np.flatnonzero(roles == TRAIN)
        n_keep = max(1, round(fraction * len(train)))
        order = np.random.default_rng([self.seed, 3, repeat]).permutation(len(train))
        roles[train[order[n_keep:]]] = -1
        return {"pool": len(train), "kept": n_keep}

    @abstractmethod
    def _roles(self, table: MoleculeTable, target: str) -> tuple[np.ndarray, dict]:
        """Roles of molecules sorted by id, and facts worth recording about the split."""

    def _split_rest(self, roles: np.ndarray, rng: np.random.Generator) -> None:
        rest = np.flatnonzero(roles < 0)
        rest = rest[rng.permutation(len(rest))]
        n_id = resolve_size(self.id_fraction, len(rest))
        n_val = resolve_size(self.val_fraction, len(rest) - n_id)
        roles[rest[:n_id]] = ID
        roles[rest[n_id : n_id + n_val]] = VAL
        roles[rest[n_id + n_val :]] = TRAIN


def _checked_subset(subset) -> tuple[float, int]:
    """`[fraction, repeat]` with 0 < fraction <= 1 and a whole repeat >= 0."""
    try:
        fraction, repeat = subset
    except (TypeError, ValueError):
        fraction, repeat = None, None
    if (
        not isinstance(fraction, (int, float))
        or isinstance(fraction, bool)
        or not 0 < fraction <= 1
        or not isinstance(repeat, int)
        or isinstance(repeat, bool)
        or repeat < 0
    ):
        raise ValueError(
            f"split.subset must be [fraction, repeat] with 0 < fraction <= 1 and a whole "
            f"repeat >= 0, e.g. split.subset=[0.1,0]; got {subset!r}"
        )
    return float(fraction), int(repeat)


class KDETailSplitter(Splitter):
    """BOOM's OOD split: the `ood_size` molecules of lowest Gaussian-KDE density of the
    raw property values (scikit-learn's `bandwidth='scott'`, n^(-1/5) in the property's
    units, no standardisation) form the OOD set. Ranked by log-density so far tails do
    not underflow into ties; molecules that tie exactly at the cut are taken smallest id
    first. Deviation from BOOM's script: exact set sizes from a seeded permutation
    instead of its per-molecule 5 % coin flip, and a validation set of its own.
    """

    name = "kde_ood"

    def __init__(
        self, *args, bandwidth: float | str = "scott", property: str | None = None, **kwargs
    ) -> None:
        super().__init__(*args, **kwargs)
        self.bandwidth = bandwidth
        self.property = property

    def settings(self) -> dict:
        # `property` only where set: the split files of runs made before it existed stay
        extra = {"property": self.property} if self.property else {}
        return {**super().settings(), "bandwidth": self.bandwidth, **extra}

    def columns(self, target: str) -> tuple[str, ...]:
        """With `property`, the tail of another column of the data set (the split of
        another task on the same molecules, e.g. for pretraining on one QM9 property
        without the test molecules of another)."""
        return (self.property or target,)

    def _roles(self, table: MoleculeTable, target: str) -> tuple[np.ndarray, dict]:
        y = table.targets[self.columns(target)[0]]
        h = scott_bandwidth(len(y)) if self.bandwidth == "scott" else float(self.bandwidth)
        log_density = gaussian_kde_log_density(y, h)
        n_ood = resolve_size(self.ood_size, len(y))
        ranked = np.lexsort((table.mol_id, log_density))
        roles = np.full(len(y), -1)
        roles[ranked[:n_ood]] = OOD
        self._split_rest(roles, np.random.default_rng(self.seed))
        cut = log_density[ranked[n_ood - 1]] if n_ood else None
        n_tied = int((log_density == cut).sum()) if n_ood else 0
        info = {
            "bandwidth_value": h,
            "ood_log_density_cut": None if cut is None else float(cut),
            "molecules_at_cut": n_tied,
        }
        return roles, info


class RandomSplitter(Splitter):
    """Control split: a random held-out set of the same size as the OOD set, so the same
    metrics compare a model's error on unseen-but-typical molecules with its error on
    the property tails."""

    name = "random"

    def _roles(self, table: MoleculeTable, target: str) -> tuple[np.ndarray, dict]:
        rng = np.random.default_rng(self.seed)
        roles = np.full(len(table), -1)
        n_ood = resolve_size(self.ood_size, len(table))
        roles[rng.permutation(len(table))[:n_ood]] = OOD
        self._split_rest(roles, rng)
        return roles, {}


def murcko_scaffold(smiles: str) -> str:
    """Bemis–Murcko scaffold SMILES ('' for acyclic molecules)."""
    RDLogger.DisableLog("rdApp.*")
    mol = Chem.MolFromSmiles(smiles)
    return MurckoScaffold.MurckoScaffoldSmiles(mol=mol, includeChirality=False)


class ScaffoldSplitter(Splitter):
    """Structure-based control split: whole Bemis–Murcko scaffold groups go to one set.

    Groups larger than half the held-out set size go to training first (as Chemprop's
    balanced scaffold split), the rest in seeded random order fill OOD, ID and
    validation up to their sizes; a scaffold therefore lies in one set only.
    """

    name = "scaffold"

    def _roles(self, table: MoleculeTable, target: str) -> tuple[np.ndarray, dict]:
        groups: dict[str, list[int]] = {}
        for row, smiles in enumerate(table.smiles):
            groups.setdefault(murcko_scaffold(str(smiles)), []).append(row)
        n = len(table)
        n_ood = resolve_size(self.ood_size, n)
        n_id = resolve_size(self.id_fraction, n - n_ood)
        n_val = resolve_size(self.val_fraction, n - n_ood - n_id)
        rng = np.random.default_rng(self.seed)
        names = sorted(groups)
        big = [s for s in names if len(groups[s]) > max(n_ood, n_id, n_val) / 2]
        small = [s for s in names if s not in set(big)]
        ordered = big + [small[i] for i in rng.permutation(len(small))]
        roles = np.full(n, TRAIN)
        quota = {OOD: n_ood, ID: n_id, VAL: n_val}
        for scaffold in ordered[len(big) :]:
            rows = groups[scaffold]
            target_set = next((s for s in (OOD, ID, VAL) if quota[s] >= len(rows)), TRAIN)
            if target_set != TRAIN:
                quota[target_set] -= len(rows)
            roles[rows] = target_set
        return roles, {"n_scaffolds": len(groups)}

    def _remedy(self, empty: list[str]) -> str:
        return (
            f"{super()._remedy(empty)} (scaffold groups larger than half the largest "
            "held-out set go to training whole)"
        )
