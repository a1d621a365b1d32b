"""The random forest as plain arrays: its traversal equals scikit-learn's trees bit for
bit, and a damaged checkpoint entry is refused by name."""

from __future__ import annotations

import numpy as np
import pytest
import sklearn
import torch
from packaging.version import Version
from sklearn.ensemble import RandomForestRegressor

from oodmol.models.tree_arrays import ForestArrays

FOREST_TAKES_NAN = Version(sklearn.__version__) >= Version("1.4")
N_FEATURES = 6


def awkward_inputs(rng: np.random.Generator, n: int, nan: bool) -> np.ndarray:
    """Float64 features with ties (small integers), a constant column, values that
    float32 rounds together, and (where the forest takes them) NaNs."""
    x = rng.integers(0, 4, size=(n, N_FEATURES)).astype(np.float64)
    x[:, 1] = 2.5
    x[:, 2] = rng.normal(size=n)
    x[:, 3] += rng.normal(scale=1e-9, size=n)
    if nan:
        missing = rng.random(x.shape) < 0.15
        missing[:, 1] = False
        x[missing] = np.nan
    return x


def at_thresholds(forest: ForestArrays, base: np.ndarray) -> np.ndarray:
    """Rows of `base` with one split's feature set to its threshold itself, to the
    nearest float32 and to the float32 just above and below: the comparisons that a
    float32/float64 slip would send the other way (rows set to infinity, which
    scikit-learn refuses, are left out)."""
    inner = np.flatnonzero(forest.children_left != -1)
    threshold = forest.threshold[inner]
    nearest = threshold.astype(np.float32)
    values = [
        threshold,
        nearest,
        np.nextafter(nearest, np.float32(np.inf)),
        np.nextafter(nearest, np.float32(-np.inf)),
    ]
    rows = np.repeat(base[np.arange(len(inner)) % len(base)], len(values), axis=0)
    features = np.repeat(forest.feature[inner], len(values))
    rows[np.arange(len(rows)), features] = np.stack(values, axis=1).ravel()
    return rows[~np.isinf(rows).any(axis=1)]  # a missing-values split's threshold is inf


def sklearn_per_tree(forest: RandomForestRegressor, x: np.ndarray) -> np.ndarray:
    return np.stack([tree.predict(x) for tree in forest.estimators_])


@pytest.mark.parametrize("min_samples_leaf", [1, 3])
@pytest.mark.parametrize(
    "nan",
    [
        False,
        pytest.param(True, marks=pytest.mark.skipif(not FOREST_TAKES_NAN, reason="sklearn < 1.4")),
    ],
)
def test_traversal_equals_every_sklearn_tree(min_samples_leaf: int, nan: bool) -> None:
    rng = np.random.default_rng(min_samples_leaf)
    x = awkward_inputs(rng, 300, nan)
    y = np.nan_to_num(x[:, 0]) - 2 * np.nan_to_num(x[:, 2]) + rng.normal(scale=0.3, size=300)
    forest = RandomForestRegressor(
        n_estimators=20, max_features=0.5, min_samples_leaf=min_samples_leaf, random_state=0
    ).fit(x, y)
    arrays = ForestArrays.from_sklearn(forest)
    test_x = awkward_inputs(rng, 2000, nan)
    test_x = np.concatenate([test_x, at_thresholds(arrays, test_x)])
    assert np.array_equal(arrays.predict_per_tree(test_x), sklearn_per_tree(forest, test_x))
    assert arrays.n_nodes == sum(tree.tree_.node_count for tree in forest.estimators_)
    if nan:  # NaNs went both ways, so the rule for them was put to the test
        inner = arrays.children_left != -1
        assert set(arrays.missing_go_to_left[inner].tolist()) == {False, True}


def stumps(thresholds: np.ndarray) -> ForestArrays:
    """One single-split tree per threshold on feature 0: leaf 0 left, leaf 1 right."""
    n = len(thresholds)
    return ForestArrays(
        node_offsets=np.arange(0, 3 * n + 1, 3, dtype=np.int64),
        children_left=np.tile(np.array([1, -1, -1], dtype=np.int64), n),
        children_right=np.tile(np.array([2, -1, -1], dtype=np.int64), n),
        feature=np.tile(np.array([0, -2, -2], dtype=np.int64), n),
        threshold=np.stack([thresholds, -2 * np.ones(n), -2 * np.ones(n)], axis=1).ravel(),
        missing_go_to_left=np.zeros(3 * n, dtype=bool),
        value=np.tile(np.array([0.0, 0.0, 1.0]), n),
        n_features=1,
    )


def test_float32_inputs_go_the_way_of_the_float64_thresholds() -> None:
    rng = np.random.default_rng(0)
    thresholds = np.concatenate(
        [
            rng.normal(size=200) * 10.0 ** rng.integers(-40, 39, size=200),
            [0.0, -0.0, 1e300, -1e300, 3.4028235677973366e38, 1.0 + 2.0**-30],
        ]
    )
    with np.errstate(over="ignore"):  # beyond float32: inf, dropped below
        nearest = thresholds.astype(np.float32)
    x = np.stack(
        [
            nearest,
            np.nextafter(nearest, np.float32(np.inf)),
            np.nextafter(nearest, np.float32(-np.inf)),
        ]
    ).ravel()[:, None]
    x = x[np.isfinite(x[:, 0])]
    goes_right = stumps(thresholds).predict_per_tree(x)
    expected = x[:, 0].astype(np.float64)[None, :] > thresholds[:, None]
    assert np.array_equal(goes_right, expected.astype(np.float64))


def test_bad_input_is_refused_by_name() -> None:
    forest = stumps(np.array([0.5]))
    with pytest.raises(ValueError, match=r"fitted on 1 features, got input of shape \(3, 2\)"):
        forest.predict_per_tree(np.zeros((3, 2)))
    x = np.zeros((4, 1))
    x[2, 0] = 1e39  # finite in float64, infinite as float32 (as scikit-learn reads it)
    with pytest.raises(ValueError, match=r"1 of 4 rows .* infinite as float32 \(first: row 2\)"):
        forest.predict_per_tree(x)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda e: e.pop("threshold"), "lacks threshold"),
        (lambda e: e.update(format=0), "not in format 1"),
        (lambda e: e.update(feature=e["feature"].int()), "'feature' is not a 1-D torch.int64"),
        (lambda e: e["children_left"].__setitem__(0, 0), "point outside their tree or backwards"),
        (lambda e: e["children_right"].__setitem__(0, -1), "a node with only one child"),
        (lambda e: e["feature"].__setitem__(0, 7), "splits on a feature outside 0..0"),
        (lambda e: e["node_offsets"].__setitem__(1, 5), "point outside their tree"),
    ],
)
def test_damaged_checkpoint_entry_is_refused_naming_the_file(damage, message) -> None:
    # two trees of three nodes: root, left leaf, right leaf
    entry = stumps(np.array([0.5, 1.5])).to_checkpoint()
    entry = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in entry.items()}
    damage(entry)
    with pytest.raises(ValueError) as refused:
        ForestArrays.from_checkpoint(entry, "runs/x.ckpt")
    assert str(refused.value).startswith("runs/x.ckpt: ")
    assert message in str(refused.value)
