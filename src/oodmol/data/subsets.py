"""Which molecules of each set a run with `max_molecules` uses, so that only they are
featurised.

Each set offers its molecules in a seeded order fixed by the split and the set alone
(`offer_order`); a run takes the first `max_molecules` of them that it can use (features,
a geometry that passes the filter). A molecule it cannot use is passed over for the next
one, so the features of a set's molecules up to the last one taken are all a run needs,
and every model (and `oodmol llm`, which needs no features) draws the same molecules but
for those replacements. A larger `max_molecules` takes the molecules of a smaller one and
more, so their feature caches grow into each other.
"""

from __future__ import annotations

import numpy as np

from oodmol.data.splits.assignment import ALL_SETS
from oodmol.data.splits.splitters import Splitter


def offer_order(
    ids: np.ndarray, name: str, max_molecules: int | None, splitter: Splitter
) -> np.ndarray:
    """The order in which set `name` offers its molecules `ids`: as they are when the run
    takes every molecule, else a permutation seeded by the split and the set."""
    if max_molecules is None:
        return np.asarray(ids, dtype=np.int64)
    rng = np.random.default_rng([getattr(splitter, "seed", 0), ALL_SETS.index(name)])
    return rng.permutation(np.asarray(ids, dtype=np.int64))


def offered(order: np.ndarray, n: int | None, unusable: np.ndarray) -> np.ndarray:
    """The shortest start of `order` that holds `n` molecules not in `unusable` (all of
    `order` where it holds fewer, or `n` is None): the molecules a run looks at."""
    if n is None:
        return order
    usable = np.flatnonzero(~np.isin(order, unusable))
    return order if len(usable) <= n else order[: usable[n - 1] + 1]


def subset(ids: np.ndarray, name: str, max_molecules: int | None, splitter: Splitter) -> np.ndarray:
    """The molecules of set `name` a run with `max_molecules` uses where it can use every
    molecule (sorted): what `oodmol llm` asks."""
    order = offer_order(ids, name, max_molecules, splitter)
    return np.sort(offered(order, max_molecules, np.empty(0, dtype=np.int64)))
