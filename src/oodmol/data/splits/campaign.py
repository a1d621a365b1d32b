"""The split of one round of a discovery campaign (`oodmol campaign`): BOOM's KDE-tail
split, whose OOD set is the pool molecules are acquired from, with the molecules acquired
so far moved into training.

The acquired molecules are a split setting, so they enter the split file's name, the run's
configuration key and its identity: every round is a run of its own, and a resumed round
cannot mix with another. The OOD set of a round is what remains of the pool, on which the
run is scored; validation and ID sets are those of `split=ood`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from oodmol.data.splits.assignment import SETS
from oodmol.data.splits.splitters import OOD, TRAIN, KDETailSplitter
from oodmol.data.table import MoleculeTable


class CampaignSplitter(KDETailSplitter):
    """`split=ood_campaign split.acquired=[<mol ids>]`.

    `max_per_set` keeps at most that many molecules of each set of the KDE-tail split (a seeded
    draw, before anything is acquired; the rest is in no set): the campaign's stand-in for
    `max_molecules`, which would cut a growing training set anew every round and could drop
    acquired molecules from it. Acquired ids that are not in the (subset) pool are refused.
    """

    name = "ood_campaign"

    def __init__(
        self,
        *args,
        acquired: Sequence[int] = (),
        max_per_set: int | None = None,
        **kwargs,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.acquired = [int(i) for i in acquired]
        if len(set(self.acquired)) != len(self.acquired):
            raise ValueError(f"split.acquired names molecules twice: {self.acquired}")
        if max_per_set is not None and int(max_per_set) < 1:
            raise ValueError(
                f"split.max_per_set must be a positive count or null, got {max_per_set}"
            )
        self.max_per_set = None if max_per_set is None else int(max_per_set)

    def settings(self) -> dict:
        return {
            **super().settings(),
            "acquired": sorted(self.acquired),
            "max_per_set": self.max_per_set,
        }

    def _roles(self, table: MoleculeTable, target: str) -> tuple[np.ndarray, dict]:
        roles, info = super()._roles(table, target)
        if self.max_per_set is not None:
            for index in range(len(SETS)):
                rows = np.flatnonzero(roles == index)
                if len(rows) > self.max_per_set:
                    rng = np.random.default_rng([self.seed, 3, index])
                    kept = rng.choice(rows, size=self.max_per_set, replace=False)
                    roles[np.setdiff1d(rows, kept)] = -1  # in no set
        pool = table.mol_id[roles == OOD]
        acquired = np.asarray(sorted(self.acquired), dtype=np.int64)
        outside = np.setdiff1d(acquired, pool)
        if len(outside):
            raise ValueError(
                f"split.acquired names {len(outside)} molecules that are not in the campaign's "
                f"pool of {len(pool)} (the OOD set{' subset' if self.max_per_set else ''}): mol_id "
                f"{outside[:10].tolist()}"
            )
        roles[np.isin(table.mol_id, acquired)] = TRAIN
        info.update({"pool": len(pool), "n_acquired": len(acquired)})
        return roles, info
