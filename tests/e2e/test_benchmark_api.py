"""oodmol as a benchmark library: a task's sets are the very molecules train.py uses, and
any model's predictions are scored as train.py's runs are (checked against an
independent recomputation and against `evaluate.py predictions=`)."""

from __future__ import annotations

import doctest
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from e2e_helpers import MLP, OOD_SIZE, QUIET, TASK_NAME, TinyTask, hand_binned, hand_metrics
from sklearn.linear_model import BayesianRidge, Ridge

import oodmol.benchmark.benchmark_task
import oodmol.benchmark.runner
from oodmol import benchmark
from oodmol.benchmark import BenchmarkTask, PredictionError
from oodmol.report.collect import collect_runs

pytestmark = pytest.mark.slow
TASK = ["task.ood_size=20", f"++task.name={TASK_NAME}"]


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory):
    """A train.py run and evaluate.py scoring a file on the tiny task, and the task as
    the API loads it (same data folder)."""
    task = TinyTask.create(tmp_path_factory.mktemp("api"))
    root = task.root
    task.submit(
        "mlp", ["train.py", *task.task_args(), *QUIET, *MLP, f"hydra.run.dir={root / 'mlp'}"]
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OODMOL_DATA_DIR", str(task.data_dir))
        b = benchmark.load("csv", path=task.csv, target_column="y", overrides=TASK)
        constant = float(b.train["target"].mean())
        rows = pd.concat([b.test["id"], b.test["ood"]])[["mol_id"]].assign(y_pred=constant)
        rows.to_csv(root / "constant.csv", index=False)
        external = [
            *task.task_args(name=False),
            "split=ood",
            f"predictions={root / 'constant.csv'}",
        ]
        task.submit(
            "external",
            ["evaluate.py", *external, "progress=false", f"hydra.run.dir={root / 'external'}"],
        )
        task.notes.update(task=b, constant=constant)
        yield task
    task.close()


def test_sets_are_the_molecules_train_py_uses(api: TinyTask) -> None:
    api.result("mlp").ok()
    b: BenchmarkTask = api.notes["task"]
    run = pd.read_csv(api.root / "mlp" / "predictions.csv")
    for name, frame in (("id", b.test["id"]), ("ood", b.test["ood"]), ("val", b.val)):
        ours = run[run["set"] == name].set_index("mol_id")
        assert sorted(frame["mol_id"]) == sorted(ours.index), name
        assert (frame.set_index("mol_id")["smiles"] == ours["smiles"]).all()
        assert np.allclose(frame.set_index("mol_id")["target"], ours["y_true"])
    metrics = json.loads((api.root / "mlp" / "metrics.json").read_text())
    assert b.card["split_hash"] == metrics["split_hash"]
    assert b.card["sizes"] == metrics["data"]["sizes"]
    assert len(b.test["ood"]) == OOD_SIZE and b.card["train_median"] == metrics["train_median"]


def test_card_says_where_the_tails_begin(api: TinyTask) -> None:
    b: BenchmarkTask = api.notes["task"]
    ood, median = b.test["ood"]["target"], b.card["train_median"]
    thresholds = b.card["ood_thresholds"]
    assert thresholds["low"] == ood[ood < median].max()
    assert thresholds["high"] == ood[ood >= median].min()
    assert b.card["source"]["sha256"] and b.card["units"] == ""
    assert "read 120, kept 120" in b.card["validation"]


def test_constant_predictor_is_scored_as_evaluate_py_scores_it(api: TinyTask) -> None:
    b: BenchmarkTask = api.notes["task"]
    c = api.notes["constant"]
    metrics = b.evaluate({s: np.full(len(b.test[s]), c) for s in b.test}, name="mean")
    for name in ("id", "ood"):
        y = b.test[name]["target"].to_numpy()
        expected = hand_metrics(y, np.full(len(y), c))
        for key, value in expected.items():
            assert metrics[name][key] == pytest.approx(value, nan_ok=True), (name, key)
    y_ood = b.test["ood"]["target"].to_numpy()
    binned = hand_binned(y_ood, np.full(len(y_ood), c), b.card["train_median"])
    assert metrics["ood"]["binned_r2"] == pytest.approx(binned["binned_r2"])
    api.result("external").ok()
    theirs = json.loads((api.root / "external" / "metrics.json").read_text())
    for name in ("id", "ood"):
        assert metrics[name] == theirs[name], name


def test_values_keyed_by_mol_id_in_any_order_score_the_same(api: TinyTask) -> None:
    b: BenchmarkTask = api.notes["task"]
    rng = np.random.default_rng(0)
    arrays = {s: rng.normal(size=len(b.test[s])) for s in b.test}
    by_position = b.evaluate(arrays)
    keyed = {s: pd.Series(arrays[s], index=b.test[s]["mol_id"]).sample(frac=1.0, random_state=1)
             for s in b.test}  # fmt: skip
    frame = {s: pd.DataFrame({"mol_id": b.test[s]["mol_id"], "y_pred": arrays[s]}) for s in b.test}
    assert b.evaluate(keyed)["ood"] == by_position["ood"] == b.evaluate(frame)["ood"]


def _short(p, b):
    return {**p, "id": p["id"][:-1]}


def _no_ood(p, b):
    return {"id": p["id"]}


def _val_as_test(p, b):
    return {**p, "val": p["id"]}


def _nan(p, b):
    return {**p, "ood": np.r_[np.nan, p["ood"][1:]]}


def _unknown_id(p, b):
    ids = [*b.test["id"]["mol_id"][:-1], 99999]
    return {**p, "id": pd.Series(p["id"], index=ids)}


def _repeated_id(p, b):
    ids = b.test["id"]["mol_id"]
    return {**p, "id": pd.Series([*p["id"], 0.0], index=[*ids, ids.iloc[0]])}


def _missing_id(p, b):
    return {**p, "id": pd.Series(p["id"][1:], index=b.test["id"]["mol_id"][1:])}


@pytest.mark.parametrize(
    "change, message",
    [
        (_short, "id: 4 predictions for the set's 5 molecules"),
        (_no_ood, r"missing \['ood'\]"),
        (_val_as_test, r"unknown \['val'\]"),
        (_nan, "ood: 1 predictions are not finite: mol"),
        (_unknown_id, "id: 1 mol_ids are not molecules of the set: mol 99999"),
        (_repeated_id, "id: 1 mol_ids have more than one prediction"),
        (_missing_id, "id: 1 molecules of the set have no prediction"),
    ],
)
def test_bad_predictions_are_named(api: TinyTask, change, message: str) -> None:
    b: BenchmarkTask = api.notes["task"]
    good = {s: np.zeros(len(b.test[s])) for s in b.test}
    with pytest.raises(PredictionError, match=message):
        b.evaluate(change(good, b))


def test_sigma_adds_calibration_metrics_and_recalibration_on_val(api: TinyTask) -> None:
    b: BenchmarkTask = api.notes["task"]
    mean = {s: np.full(len(b.test[s]), api.notes["constant"]) for s in b.test}
    sigma = {s: np.full(len(b.test[s]), 0.5) for s in b.test}
    metrics = b.evaluate(mean, sigma=sigma)
    y = b.test["id"]["target"].to_numpy()
    nll = np.mean(0.5 * math.log(2 * math.pi * 0.25) + (y - mean["id"]) ** 2 / (2 * 0.25))
    assert metrics["uq"]["id"]["total"]["nll"] == pytest.approx(nll)
    assert "uq_recalibrated" not in metrics  # no validation predictions to fit on
    val = np.full(len(b.val), api.notes["constant"])
    recalibrated = b.evaluate(mean, sigma=sigma, val=val, val_sigma=np.full(len(b.val), 0.5))
    assert set(recalibrated["uq_recalibrated"]) >= {"zscaling", "conformal"}
    with pytest.raises(PredictionError, match="ood: 20 sigmas are negative"):
        b.evaluate(mean, sigma={**sigma, "ood": -sigma["ood"]})


def test_sklearn_model_runs_saves_and_joins_the_leaderboard(api: TinyTask) -> None:
    api.result("mlp").ok()
    b: BenchmarkTask = api.notes["task"]
    runs_dir = api.root / "runs"
    runs = benchmark.run(Ridge(alpha=10.0), b, features="morgan", seeds=(0, 1), save_to=runs_dir)
    assert [r["seed"] for r in runs] == [0, 1] and runs[0]["ood"] == runs[1]["ood"]  # no seed
    saved = runs_dir / TASK_NAME / "ood" / "Ridge" / "0"
    rows = pd.read_csv(saved / "predictions.csv")
    ood = rows[rows["set"] == "ood"]
    assert runs[0]["ood"]["rmse"] == pytest.approx(
        hand_metrics(ood["y_true"], ood["y_pred"])["rmse"]
    )
    assert (saved / "parity.png").is_file()
    with pytest.raises(FileExistsError, match="already holds a run"):
        benchmark.run(Ridge(alpha=10.0), b, features="morgan", seeds=(0,), save_to=runs_dir)
    shutil.copytree(api.root / "mlp", runs_dir / "ours")
    labels = set(collect_runs(runs_dir).runs["model"])
    assert labels == {"Ridge [external]", "mlp [shortened]"}


def test_model_with_its_own_sigma_is_scored_with_it(api: TinyTask) -> None:
    b: BenchmarkTask = api.notes["task"]
    (run,) = benchmark.run(BayesianRidge(), b, features="morgan", seeds=(0,))
    assert run["uq"]["method"] == "native" and "zscaling" in run["uq_recalibrated"]


def test_task_saves_and_reads_back(api: TinyTask, tmp_path: Path) -> None:
    b: BenchmarkTask = api.notes["task"]
    again = BenchmarkTask.read(b.save(tmp_path / "saved"))
    for name, frame in b.sets().items():
        pd.testing.assert_frame_equal(again.sets()[name], frame)
    assert (again.card, again.name, again.split, again.seed) == (b.card, b.name, b.split, b.seed)
    assert json.loads(json.dumps(b.evaluate({s: np.zeros(len(b.test[s])) for s in b.test})))


def test_cached_features_and_conformers(api: TinyTask) -> None:
    b: BenchmarkTask = api.notes["task"]
    vectors = b.features("morgan")
    assert list(vectors["ood"].index) == list(b.test["ood"]["mol_id"])
    assert vectors["train"].shape == (len(b.train), 2048)
    atoms, positions = b.conformers("id")[0]
    assert positions.shape == (len(atoms), 3)


@pytest.mark.parametrize("module", [oodmol.benchmark.benchmark_task, oodmol.benchmark.runner])
def test_docstring_examples_run(api: TinyTask, module) -> None:
    result = doctest.testmod(
        module, extraglobs={"tiny_csv": str(api.csv)}, optionflags=doctest.ELLIPSIS
    )
    assert result.attempted > 0 and result.failed == 0
