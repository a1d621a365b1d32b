"""The random forest as plain arrays: its traversal equals scikit-learn's trees bit for
bit, its checkpoint loads weights-only and predicts as before saving, and a checkpoint
that plants code (the older pickled forest, or a malicious torch pickle) is refused
without running it."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import sklearn
import torch
from e2e_helpers import QUIET, RF, TinyTask
from omegaconf import OmegaConf
from packaging.version import Version
from paths import REPO
from sklearn.ensemble import RandomForestRegressor

from oodmol.data.batches import VectorBatch
from oodmol.inference.checkpoint import CheckpointError
from oodmol.inference.predict import predict_file
from oodmol.inference.rescore import score_checkpoint
from oodmol.models.fitted.forest import RandomForestModule
from oodmol.models.fitted.tree_arrays import ForestArrays
from oodmol.training.run_folder import RunFolderError, read_run_entry

REPO = REPO
FOREST_TAKES_NAN = Version(sklearn.__version__) >= Version("1.4")
N_FEATURES = 6


class PlantsMarker:
    """Unpickling it creates the file `path`: the stand-in for code a checkpoint runs."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


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


def fitted_module(n_jobs: int = 1) -> tuple[RandomForestModule, RandomForestRegressor, dict]:
    rng = np.random.default_rng(0)
    x = awkward_inputs(rng, 200, nan=False).astype(np.float32)
    y = x[:, 0] + rng.normal(scale=0.1, size=200)
    module = RandomForestModule(n_estimators=20, min_samples_leaf=2, n_jobs=n_jobs, seed=3)
    forest = module.fit_training_set(x, y)
    x = torch.from_numpy(awkward_inputs(rng, 50, nan=False).astype(np.float32))
    batch = VectorBatch(x=x, index=torch.arange(len(x)))
    return module, forest, batch


def test_checkpoint_round_trip_is_weights_only_and_predicts_identically(tmp_path: Path) -> None:
    module, forest, batch = fitted_module()
    before = module.predict_batch(batch)
    expected = forest.predict(batch.x.numpy())  # sklearn's own mean, summed its way
    assert np.allclose(before.mean.numpy(), expected, rtol=1e-6, atol=1e-6)
    assert module.n_params() == sum(tree.tree_.node_count for tree in forest.estimators_)

    checkpoint = {"state_dict": module.state_dict()}
    module.on_save_checkpoint(checkpoint)
    path = tmp_path / "forest.ckpt"
    torch.save(checkpoint, path)
    loaded = torch.load(path, map_location="cpu", weights_only=True)
    assert "sklearn_forest" not in loaded
    assert all(isinstance(v, torch.Tensor | int) for v in loaded["random_forest"].values())
    fresh = RandomForestModule(n_estimators=20)
    fresh.load_state_dict(loaded["state_dict"])
    fresh.on_load_checkpoint(loaded)
    after = fresh.predict_batch(batch)
    assert torch.equal(after.mean, before.mean)
    assert torch.equal(after.var_epistemic, before.var_epistemic)
    assert fresh.n_params() == module.n_params()


@pytest.mark.parametrize("n_jobs", [-1, 0])
def test_forest_gets_the_runs_cores_for_a_non_positive_n_jobs(monkeypatch, n_jobs: int) -> None:
    monkeypatch.setattr("oodmol.parallel.available_cores", lambda: 3)
    _, forest, _ = fitted_module(n_jobs=n_jobs)
    assert forest.n_jobs == 3


def test_positive_n_jobs_is_kept(monkeypatch) -> None:
    monkeypatch.setattr("oodmol.parallel.available_cores", lambda: 3)
    _, forest, _ = fitted_module(n_jobs=1)
    assert forest.n_jobs == 1


def test_pickled_forest_of_older_checkpoints_is_refused_unopened(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    payload = pickle.dumps(PlantsMarker(marker))
    pickle.loads(payload).close()  # the payload is live: unpickled, it plants the marker
    assert marker.exists()
    marker.unlink()
    with pytest.raises(ValueError, match=r"the checkpoint holds no random forest .*pickled"):
        RandomForestModule().on_load_checkpoint({"sklearn_forest": payload})
    assert not marker.exists()


def test_malicious_torch_pickle_is_refused_by_every_checkpoint_loader(tmp_path: Path) -> None:
    """evaluate.py (scoring), oodmol predict and a resume all load weights-only."""
    marker, path = tmp_path / "ran", tmp_path / "evil.ckpt"
    torch.save({"x": PlantsMarker(marker)}, path)
    torch.load(path, weights_only=False)["x"].close()  # live when fully unpickled
    assert marker.exists()
    marker.unlink()
    refused = "holds objects that only code can rebuild, which oodmol never loads"
    with pytest.raises(CheckpointError, match=refused):
        score_checkpoint(OmegaConf.create({"ckpt_path": str(path)}), tmp_path)
    with pytest.raises(CheckpointError, match=refused):
        predict_file(
            OmegaConf.create(
                {"ckpt_path": str(path), "input": "in.csv", "out": str(tmp_path / "out.csv")}
            )
        )
    with pytest.raises(RunFolderError, match="cannot be read as a checkpoint"):
        read_run_entry(path)
    assert not marker.exists()


@pytest.mark.slow
def test_evaluate_refuses_a_checkpoint_with_the_old_pickled_forest(tmp_path: Path) -> None:
    """A genuine run's checkpoint, its forest swapped for the older pickled one holding a
    payload: evaluate.py fails naming the file, and the payload never runs."""
    tiny = TinyTask.create(tmp_path, workers=1)
    try:
        run = tmp_path / "rf"
        train = ["train.py", *tiny.task_args(), *QUIET, *RF, f"hydra.run.dir={run}"]
        tiny.run(train).ok()
        checkpoint = torch.load(run / "checkpoints" / "best.ckpt", weights_only=True)
        assert "random_forest" in checkpoint
        marker, planted = tmp_path / "ran", tmp_path / "planted.ckpt"
        del checkpoint["random_forest"]
        checkpoint["sklearn_forest"] = pickle.dumps(PlantsMarker(marker))
        torch.save(checkpoint, planted)
        evaluate = ["evaluate.py", f"ckpt_path={planted}", "progress=false"]
        result = tiny.run([*evaluate, f"hydra.run.dir={tmp_path / 'eval'}"]).failed()
        assert f"{planted} holds no random forest" in result.stderr
        assert not marker.exists()
    finally:
        tiny.close()
