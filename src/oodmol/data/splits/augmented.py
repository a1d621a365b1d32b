"""BOOM's OOD data augmentation (its Fig. 7): a few OOD molecules added to training.

The OOD set of the KDE-tail split is cut once into a fixed hold-out, on which the run is
scored (the `ood` set), and a pool; `n_augment` pool molecules whose property lies below
the `low_quantile` or above the `high_quantile` of the task's values join the training
set. The rest of the pool is in no set. Training, validation and ID sets are those of
`split=ood`, and the hold-out does not depend on `n_augment`; the molecules added for N
are the first N of one seeded order of the pool, so the sets are nested as N grows.
"""

from __future__ import annotations

import numpy as np

from oodmol.data.splits.splitters import OOD, TRAIN, KDETailSplitter
from oodmol.data.table import MoleculeTable


class OODAugmentedSplitter(KDETailSplitter):
    """`split=ood_augmented split.n_augment=N`.

    The hold-out is `holdout_size` molecules (BOOM: 5,000 of QM9's 10,000), but at most
    `holdout_fraction` of the OOD set, so that a small OOD set (the 10k set's 1,000)
    keeps a pool: min(holdout_size, floor(holdout_fraction · n_ood)) molecules, drawn at
    random (seeded). Asking for more molecules than the pool holds beyond the quantiles is
    an error that names the pool's size.
    """

    name = "ood_augmented"

    def __init__(
        self,
        *args,
        n_augment: int = 0,
        holdout_size: int = 5000,
        holdout_fraction: float = 0.5,
        low_quantile: float = 0.25,
        high_quantile: float = 0.75,
        **kwargs,
    ) -> None:
        super().__init__(*args, **kwargs)
        if n_augment < 0 or holdout_size < 1 or not 0 < holdout_fraction < 1:
            raise ValueError(
                f"ood_augmented needs n_augment >= 0, holdout_size >= 1 and 0 < "
                f"holdout_fraction < 1; got {n_augment}, {holdout_size}, {holdout_fraction}"
            )
        if not 0 <= low_quantile <= high_quantile <= 1:
            raise ValueError(
                f"quantiles must satisfy 0 <= low <= high <= 1, got {low_quantile}, {high_quantile}"
            )
        self.n_augment = int(n_augment)
        self.holdout_size = int(holdout_size)
        self.holdout_fraction = float(holdout_fraction)
        self.low_quantile = float(low_quantile)
        self.high_quantile = float(high_quantile)

    def settings(self) -> dict:
        return {
            **super().settings(),
            "n_augment": self.n_augment,
            "holdout_size": self.holdout_size,
            "holdout_fraction": self.holdout_fraction,
            "low_quantile": self.low_quantile,
            "high_quantile": self.high_quantile,
        }

    def _roles(self, table: MoleculeTable, target: str) -> tuple[np.ndarray, dict]:
        roles, info = super()._roles(table, target)
        y = table.targets[self.columns(target)[0]]
        ood = np.flatnonzero(roles == OOD)  # rows sorted by molecule id
        n_holdout = min(self.holdout_size, int(np.floor(self.holdout_fraction * len(ood))))
        drawn = np.random.default_rng([self.seed, 1]).permutation(ood)
        pool = np.sort(drawn[n_holdout:])
        low, high = np.quantile(y, [self.low_quantile, self.high_quantile])
        eligible = pool[(y[pool] < low) | (y[pool] > high)]
        if self.n_augment > len(eligible):
            raise ValueError(
                f"split.n_augment={self.n_augment}, but the pool holds {len(eligible)} "
                f"molecules beyond the {self.low_quantile:g}/{self.high_quantile:g} quantiles "
                f"(OOD set {len(ood)}, hold-out {n_holdout}: min(holdout_size "
                f"{self.holdout_size}, holdout_fraction {self.holdout_fraction:g} of the OOD "
                "set)); lower n_augment or the hold-out"
            )
        order = np.random.default_rng([self.seed, 2]).permutation(len(eligible))
        roles[pool] = -1  # in no set
        roles[eligible[order[: self.n_augment]]] = TRAIN
        info.update(
            {
                "ood_set": len(ood),
                "holdout": n_holdout,
                "pool": len(pool),
                "pool_beyond_quantiles": len(eligible),
                "quantile_values": [float(low), float(high)],
            }
        )
        return roles, info
