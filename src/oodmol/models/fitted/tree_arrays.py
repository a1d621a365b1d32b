"""A fitted regression forest as plain arrays, and prediction from them.

A checkpoint must load without running code, so the forest cannot travel as a pickled
scikit-learn object (unpickling runs whatever the file names). It travels instead as the
few numeric arrays prediction needs, and is predicted from them here with scikit-learn's
own decision rule, so that a run's predictions and those of `evaluate.py` on its
checkpoint come from the same arrays and the same code.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import torch
from sklearn.ensemble import RandomForestRegressor

FORMAT = 1
LEAF = -1  # scikit-learn's child index at a leaf (`_tree.TREE_LEAF`)
ARRAYS = {  # one entry per node of every tree, the trees one after another
    "children_left": torch.int64,  # the tree's own node index, LEAF at a leaf
    "children_right": torch.int64,
    "feature": torch.int64,
    "threshold": torch.float64,
    "missing_go_to_left": torch.bool,
    "value": torch.float64,
}
# (tree, molecule) pairs that descend together: bounds the traversal's working memory
# (a few arrays of this length) and keeps it near the CPU's cache
PAIRS_PER_CHUNK = 1 << 18
# Pairs at a leaf leave the working set every few levels (a leaf points to itself, so
# a pair that reached one stays there until then): sparing a filter at every level.
LEVELS_PER_COMPACTION = 4
# Columns of the traversal's node records: one gather per level fetches all four.
LEFT, RIGHT, FEATURE, THRESHOLD = range(4)


@dataclass(frozen=True, eq=False)
class ForestArrays:
    """Every tree's nodes, concatenated: tree t owns nodes `node_offsets[t]` up to
    `node_offsets[t + 1]`, and its child indices count from its own first node, as in
    scikit-learn. `n_features` is the number of input columns the forest was fitted on.
    """

    node_offsets: np.ndarray  # int64 (n_trees + 1,), from 0 to the number of nodes
    children_left: np.ndarray
    children_right: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray
    missing_go_to_left: np.ndarray
    value: np.ndarray
    n_features: int
    _records: np.ndarray = field(init=False, repr=False)
    _is_leaf: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._validate()
        object.__setattr__(self, "_is_leaf", self.children_left == LEAF)
        object.__setattr__(self, "_records", self._node_records())

    @classmethod
    def from_sklearn(cls, forest: RandomForestRegressor) -> ForestArrays:
        """The arrays of a fitted single-output forest, read from each tree's public
        `tree_` attributes."""
        if getattr(forest, "n_outputs_", None) != 1:
            raise ValueError("ForestArrays.from_sklearn needs a fitted single-output forest")
        trees = [estimator.tree_ for estimator in forest.estimators_]

        def joined(name: str, dtype: type) -> np.ndarray:
            return np.concatenate([getattr(tree, name) for tree in trees]).astype(dtype)

        return cls(
            node_offsets=np.cumsum([0] + [tree.node_count for tree in trees], dtype=np.int64),
            children_left=joined("children_left", np.int64),
            children_right=joined("children_right", np.int64),
            feature=joined("feature", np.int64),
            threshold=joined("threshold", np.float64),
            missing_go_to_left=joined("missing_go_to_left", np.bool_),
            value=np.concatenate([tree.value[:, 0, 0] for tree in trees]).astype(np.float64),
            n_features=int(forest.n_features_in_),
        )

    @property
    def n_trees(self) -> int:
        return len(self.node_offsets) - 1

    @property
    def n_nodes(self) -> int:
        return len(self.value)

    def predict_per_tree(self, x: np.ndarray) -> np.ndarray:
        """Every tree's prediction, shape (n_trees, n_molecules): bit for bit what each
        scikit-learn tree's `predict` gives.

        As in scikit-learn, `x` is cast to float32 and compared with the float64
        thresholds (`x <= threshold` goes left), a NaN goes where the node's
        `missing_go_to_left` says, and an infinite value is refused. All trees descend
        together, one level per step, over chunks of molecules.
        """
        x = np.asarray(x)
        if x.ndim != 2 or x.shape[1] != self.n_features:
            raise ValueError(
                f"the forest was fitted on {self.n_features} features, got input of shape {x.shape}"
            )
        with np.errstate(over="ignore"):  # beyond float32's range: refused just below
            x = x.astype(np.float32)
        infinite = np.isinf(x).any(axis=1)
        if infinite.any():
            raise ValueError(
                f"{int(infinite.sum())} of {len(x)} rows have features that are infinite as "
                f"float32 (first: row {int(np.argmax(infinite))}); the forest, like "
                "scikit-learn's, takes finite values or NaN"
            )
        out = np.empty((self.n_trees, len(x)), dtype=np.float64)
        chunk = max(1, PAIRS_PER_CHUNK // self.n_trees)
        for start in range(0, len(x), chunk):
            stop = min(start + chunk, len(x))
            out[:, start:stop] = self._descend(x[start:stop])
        return out

    def _descend(self, x: np.ndarray) -> np.ndarray:
        """The leaf value each (tree, molecule) pair of `x` reaches, level by level."""
        n = len(x)
        by_feature = np.ascontiguousarray(x.T).ravel()  # a split reads one feature's row
        has_nan = bool(np.isnan(by_feature).any())
        leaf_value = np.empty(self.n_trees * n, dtype=np.float64)
        pair = np.arange(self.n_trees * n)  # tree * n + molecule
        node = np.repeat(self.node_offsets[:-1], n)
        molecule = pair % n
        level = 0
        while True:
            if level % LEVELS_PER_COMPACTION == 0:
                done = self._is_leaf[node]
                leaf_value[pair[done]] = self.value[node[done]]
                pair, node, molecule = pair[~done], node[~done], molecule[~done]
                if not pair.size:
                    return leaf_value.reshape(self.n_trees, n)
            record = self._records.take(node, axis=0)
            row_start = np.multiply(record[:, FEATURE], n, dtype=np.int64)
            seen = by_feature[row_start + molecule]
            go_left = seen <= record[:, THRESHOLD].view(np.float32)
            if has_nan:
                go_left |= np.isnan(seen) & self.missing_go_to_left[node]
            node = np.where(go_left, record[:, LEFT], record[:, RIGHT])
            level += 1

    def _node_records(self) -> np.ndarray:
        """Per node, int32 columns LEFT, RIGHT (global node indices; a leaf points to
        itself), FEATURE and THRESHOLD (the float32 bits of the largest float32 not above
        the float64 threshold, which sends every float32 input the same way: x <= t
        exactly when x <= that float32). Half the bytes of int64/float64 fields, so the
        node table of a 500-tree forest stays closer to the cache."""
        tree_start = np.repeat(self.node_offsets[:-1], np.diff(self.node_offsets))
        itself = np.arange(self.n_nodes)
        with np.errstate(over="ignore"):  # beyond float32's range: ±inf, then stepped
            below = self.threshold.astype(np.float32)
        below = np.where(below > self.threshold, np.nextafter(below, np.float32(-np.inf)), below)
        records = np.empty((self.n_nodes, 4), dtype=np.int32)
        records[:, LEFT] = np.where(self._is_leaf, itself, self.children_left + tree_start)
        records[:, RIGHT] = np.where(self._is_leaf, itself, self.children_right + tree_start)
        records[:, FEATURE] = np.where(self._is_leaf, 0, self.feature)
        records[:, THRESHOLD] = below.view(np.int32)
        return records

    def to_checkpoint(self) -> dict:
        """Tensors and ints only: a checkpoint that `torch.load(weights_only=True)` reads."""
        arrays = {name: torch.from_numpy(getattr(self, name)) for name in ARRAYS}
        return {
            "format": FORMAT,
            "n_features": self.n_features,
            "node_offsets": torch.from_numpy(self.node_offsets),
            **arrays,
        }

    @classmethod
    def from_checkpoint(cls, entry: Mapping, where: str = "the checkpoint") -> ForestArrays:
        """The arrays written by `to_checkpoint`, checked so that a damaged or foreign
        entry fails here, naming `where`, instead of misdirecting the traversal."""
        if not isinstance(entry, Mapping) or entry.get("format") != FORMAT:
            raise ValueError(f"{where}: the forest's entry is not in format {FORMAT}")
        missing = [key for key in ("n_features", "node_offsets", *ARRAYS) if key not in entry]
        if missing:
            raise ValueError(f"{where}: the forest's entry lacks {', '.join(missing)}")
        dtypes = {"node_offsets": torch.int64, **ARRAYS}
        for name, dtype in dtypes.items():
            tensor = entry[name]
            if not isinstance(tensor, torch.Tensor) or tensor.dtype != dtype or tensor.ndim != 1:
                raise ValueError(f"{where}: the forest's {name!r} is not a 1-D {dtype} tensor")
        if not isinstance(entry["n_features"], int):
            raise ValueError(f"{where}: the forest's 'n_features' is not an int")
        try:
            return cls(
                n_features=entry["n_features"],
                **{name: entry[name].numpy() for name in dtypes},
            )
        except ValueError as error:
            raise ValueError(f"{where}: {error}") from None

    def _validate(self) -> None:
        """Shapes agree and every tree is a tree: children lie in their own tree and
        after their parent (as scikit-learn numbers nodes), so each descent ends at a
        leaf, and split features exist."""
        offsets, n = self.node_offsets, self.n_nodes
        if len(offsets) < 2 or offsets[0] != 0 or offsets[-1] != n:
            raise ValueError("the forest's node offsets do not span its nodes")
        if np.any(np.diff(offsets) < 1):
            raise ValueError("the forest has a tree without nodes")
        if n >= np.iinfo(np.int32).max:
            raise ValueError(f"the forest has {n} nodes, more than int32 node indices allow")
        if self.n_features < 1:
            raise ValueError(f"the forest has {self.n_features} input features")
        for name in ARRAYS:
            if getattr(self, name).shape != (n,):
                raise ValueError(f"the forest's {name!r} has not one entry per node")
        tree_size = np.repeat(np.diff(offsets), np.diff(offsets))
        own_index = np.arange(n) - np.repeat(offsets[:-1], np.diff(offsets))
        leaf = self.children_left == LEAF
        if np.any(leaf != (self.children_right == LEAF)):
            raise ValueError("the forest has a node with only one child")
        for name in ("children_left", "children_right"):
            child = getattr(self, name)
            if np.any(~leaf & ((child <= own_index) | (child >= tree_size))):
                raise ValueError(f"the forest's {name!r} point outside their tree or backwards")
        if np.any(~leaf & ((self.feature < 0) | (self.feature >= self.n_features))):
            raise ValueError(f"the forest splits on a feature outside 0..{self.n_features - 1}")
