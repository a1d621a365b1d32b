"""End to end: `train.py` and `evaluate.py` as a user runs them, on a tiny CSV task.

One module fixture starts every command line of this file in the background (two at a
time) and the tests assert on what each one wrote: result files whose numbers agree
with the predictions, determinism, resuming, re-scoring a checkpoint or an external
predictions file, and clear failures on bad input.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from e2e_helpers import (
    MLP,
    OOD_SIZE,
    PNG_MAGIC,
    QUIET,
    RF,
    TASK_NAME,
    Result,
    TinyTask,
    hand_binned,
    hand_metrics,
    load_tiny_split,
    same_number,
    scored_rows,
)

from oodmol.provenance import source_commit

slow = pytest.mark.slow
COLUMNS = ["mol_id", "smiles", "set", "y_true", "y_pred"]
METRIC_KEYS = {"n", "rmse", "mae", "r2", "spearman"}
OOD_KEYS = METRIC_KEYS | {"binned_r2", "r2_low", "r2_high"}
HEADER_KEYS = {"task", "split", "model", "seed", "split_hash", "n_params", "train_seconds"}
UNPARSEABLE, NOT_IN_TASK = "C1CC", "CCCCCCCCCCO"
UNKNOWN_MOL_ID = 10_000


# ---------------------------------------------------------------------------- the runs


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):
    task = TinyTask.create(tmp_path_factory.mktemp("train_e2e"))
    root = task.root

    def train(name: str, *args: str) -> list[str]:
        return ["train.py", *task.task_args(), *QUIET, *args, f"hydra.run.dir={root / name}"]

    def evaluate(name: str, *args: str) -> list[str]:
        return ["evaluate.py", *args, "progress=false", f"hydra.run.dir={root / name}"]

    best = root / "mlp" / "checkpoints" / "best.ckpt"
    task.submit_chain(
        ("mlp", train("mlp", *MLP, "logger=many")),
        ("eval_ckpt", evaluate("eval_ckpt", f"ckpt_path={best}")),
    )
    task.submit("rf", train("rf", *RF))
    task.submit("mlp_again", train("mlp_again", *MLP, "logger=many"))

    # external predictions files need the split: computed here as the CLIs compute it
    data, split = load_tiny_split(task)
    task.notes.update(data=data, split=split, **write_external_files(task, data, split))
    external = [*task.task_args(name=False), "split=ood"]
    for name in ("smiles", "mol_id", "duplicate", "nan"):
        file = task.notes[f"{name}_file"]
        task.submit(f"eval_{name}", evaluate(f"eval_{name}", *external, f"predictions={file}"))
    task.submit("eval_neither", evaluate("eval_neither"))
    task.submit(
        "eval_both",
        evaluate("eval_both", f"ckpt_path={root / 'no.ckpt'}", f"predictions={root / 'no.csv'}"),
    )
    task.submit("bad_model", ["train.py", "model=nope", f"hydra.run.dir={root / 'bad_model'}"])
    mode_sweep = [*task.task_args(), *QUIET, *RF, "seed=0,1", "hydra.mode=MULTIRUN"]
    task.submit("mode_multirun", ["train.py", *mode_sweep, f"hydra.sweep.dir={root / 'swept'}"])
    task.submit("bad_key", ["train.py", "nonsense=1", f"hydra.run.dir={root / 'bad_key'}"])

    # train on for longer: one epoch, then on to two from its last.ckpt; another budget
    # is another configuration, so the longer run gets a folder of its own
    last = root / "one_epoch" / "checkpoints" / "last.ckpt"

    def one_epoch() -> Result:
        result = task.run(train("one_epoch", *MLP, "model.max_epochs=1")).ok()
        shutil.copy(last, root / "after_one_epoch.ckpt")
        return result

    task.submit_chain(
        ("one_epoch", one_epoch),
        ("longer", train("longer", *MLP, "model.max_epochs=2", f"ckpt_path={last}")),
        ("longer_here", train("one_epoch", *MLP, "model.max_epochs=2", f"ckpt_path={last}")),
    )

    # the bugs' own runs (strict xfail tests below)
    csv_default = ["train.py", *task.task_args(name=False), *QUIET, *MLP]
    task.submit("csv_default_name", csv_default)
    yield task
    task.close()


def write_external_files(task: TinyTask, data, split) -> dict:
    """Prediction files in the formats evaluate.py reads, and what it should report.

    The SMILES file leaves out two ID and three OOD molecules, spells every other
    molecule non-canonically, and adds a training molecule, an unparseable SMILES and a
    molecule that is not in the task."""
    from rdkit import Chem

    smiles_of = dict(zip(data.table.mol_id.tolist(), data.table.smiles.tolist(), strict=True))
    y_of = dict(zip(data.table.mol_id.tolist(), data.y.tolist(), strict=True))
    id_ids, ood_ids = split.sets["id"].tolist(), split.sets["ood"].tolist()
    missing_id, missing_ood = id_ids[-2:], ood_ids[:3]
    covered = [i for i in id_ids + ood_ids if i not in missing_id + missing_ood]
    pred = {i: 0.8 * y_of[i] + 0.3 + 0.05 * (k % 5 - 2) for k, i in enumerate(covered)}

    def respelled(mol_id: int) -> str:
        mol = Chem.MolFromSmiles(smiles_of[mol_id])
        for seed in range(50):
            spelling = Chem.MolToRandomSmilesVect(mol, 1, randomSeed=seed)[0]
            if spelling != smiles_of[mol_id]:
                return spelling
        raise AssertionError(f"no non-canonical spelling of {smiles_of[mol_id]}")

    train_id = int(split.sets["train"][0])
    assert Chem.MolToSmiles(Chem.MolFromSmiles(NOT_IN_TASK)) not in smiles_of.values()
    rows = [(respelled(i) if k % 2 else smiles_of[i], pred[i]) for k, i in enumerate(covered)]
    rows = rows[::-1]
    rows[3:3] = [(smiles_of[train_id], 0.0), (UNPARSEABLE, 1.0), (NOT_IN_TASK, 2.0)]
    smiles_file = task.root / "external_smiles.csv"
    pd.DataFrame(rows, columns=["smiles", "y_pred"]).to_csv(smiles_file, index=False)

    # all ID and OOD molecules by mol_id, plus an unreadable and an unknown id
    every = id_ids + ood_ids
    by_id = {i: 0.5 * y_of[i] + 1.0 for i in every}
    lines = [f"{i},{by_id[i]!r}" for i in every]
    lines[2:2] = ["abc,1.0", f"{UNKNOWN_MOL_ID},1.0"]
    mol_id_file = task.root / "external_mol_id.csv"
    mol_id_file.write_text("mol_id,y_pred\n" + "\n".join(lines) + "\n")

    duplicate_file = task.root / "external_duplicate.csv"
    duplicated = covered[0]
    dup_rows = [(smiles_of[duplicated], 1.0), *rows, (respelled(duplicated), 2.0)]
    pd.DataFrame(dup_rows, columns=["smiles", "y_pred"]).to_csv(duplicate_file, index=False)

    nan_file = task.root / "external_nan.csv"
    nan_id = ood_ids[1]
    nan_lines = [f"{i},{'nan' if i == nan_id else repr(by_id[i])}" for i in every]
    nan_file.write_text("mol_id,y_pred\n" + "\n".join(nan_lines) + "\n")

    return {
        "smiles_file": smiles_file,
        "smiles_rows": len(rows),
        "smiles_pred": pred,
        "missing": {"id": missing_id, "ood": missing_ood},
        "train_id": train_id,
        "mol_id_file": mol_id_file,
        "mol_id_pred": by_id,
        "unreadable_line": 2 + 2,  # data row 2 is on line 4
        "duplicate_file": duplicate_file,
        "duplicated": duplicated,
        "nan_file": nan_file,
        "nan_id": nan_id,
        "nan_line": 2 + every.index(nan_id),
        "y_of": y_of,
        "smiles_of": smiles_of,
    }


def run_dir(tiny: TinyTask, name: str, job: str | None = None) -> Path:
    """The folder of a run that must have succeeded (job name = folder name by default)."""
    tiny.result(job or name).ok()
    return tiny.root / name


def metrics_of(folder: Path) -> dict:
    return json.loads((folder / "metrics.json").read_text())


# ------------------------------------------------------------------- 1. a training run


@slow
@pytest.mark.parametrize("model", ["mlp", "rf"])
def test_train_run_writes_its_result_files(tiny: TinyTask, model: str) -> None:
    run = run_dir(tiny, model)
    metrics = metrics_of(run)
    assert HEADER_KEYS | {"id", "ood", "versions"} <= set(metrics)
    assert (metrics["task"], metrics["split"], metrics["model"], metrics["seed"]) == (
        TASK_NAME,
        "ood",
        model,
        0,
    )
    assert set(metrics["id"]) >= METRIC_KEYS
    assert set(metrics["ood"]) >= OOD_KEYS
    assert metrics["ood"]["n"] == OOD_SIZE
    assert metrics["id"]["n"] == len(tiny.notes["split"].sets["id"])
    assert metrics["split_hash"] == tiny.notes["split"].hash
    assert metrics["n_params"] > 0
    assert metrics["train_seconds"] > 0
    assert metrics["status"] == "complete"
    # every test run overrides the model's epoch budget (or the forest's size): flagged so
    # that a leaderboard never takes it for a full run
    assert metrics["flags"] == (["shortened"] if model == "mlp" else [])
    assert {"python", "torch", "lightning", "rdkit"} <= set(metrics["versions"])
    assert metrics["versions"]["oodmol_commit"] == source_commit() != "unknown"
    assert (run / "parity.png").read_bytes()[:8] == PNG_MAGIC
    assert (run / "checkpoints" / "last.ckpt").is_file()
    if model == "mlp":
        assert (run / "checkpoints" / "best.ckpt").is_file()


@slow
@pytest.mark.parametrize("model", ["mlp", "rf"])
def test_metrics_agree_with_predictions_file(tiny: TinyTask, model: str) -> None:
    run = run_dir(tiny, model)
    metrics = metrics_of(run)
    predictions = pd.read_csv(run / "predictions.csv")
    rows = scored_rows(predictions)
    for name in ("id", "ood"):
        part = rows[rows["set"] == name]
        expected = hand_metrics(part["y_true"], part["y_pred"])
        if name == "ood":
            expected |= hand_binned(part["y_true"], part["y_pred"], metrics["train_median"])
        for key, value in expected.items():
            assert same_number(metrics[name][key], value), (name, key, metrics[name][key], value)
    # the stretched predictions: the validation rows' line ŷ ≈ c + d·y, solved for y
    val = predictions[predictions["set"] == "val"]
    d, c = np.polyfit(val["y_true"], val["y_pred"], 1)
    ood = rows[rows["set"] == "ood"]
    stretched = metrics["stretched"]
    assert (stretched["slope"], stretched["intercept"]) == (
        pytest.approx(1 / d),
        pytest.approx(-c / d),
    )
    by_hand = hand_metrics(ood["y_true"], (ood["y_pred"] - c) / d)["rmse"]
    assert stretched["ood"]["rmse"] == pytest.approx(by_hand, rel=1e-9)


@slow
@pytest.mark.parametrize("model", ["mlp", "rf"])
def test_predictions_file_has_one_row_per_test_molecule(tiny: TinyTask, model: str) -> None:
    run = run_dir(tiny, model)
    predictions = pd.read_csv(run / "predictions.csv")
    assert list(predictions.columns[:5]) == COLUMNS
    assert ("y_std" in predictions) == (model == "rf")
    if model == "rf":
        assert (predictions["y_std"] >= 0).all()
    split, molecules = tiny.notes["split"], tiny.molecules
    rows = scored_rows(predictions)
    for name in ("id", "ood"):
        part = rows[rows["set"] == name]
        assert sorted(part["mol_id"]) == sorted(split.sets[name].tolist())
    # mol id k is row k of the CSV: targets and (canonical) SMILES are those of that row
    assert np.allclose(rows["y_true"], molecules["y"].to_numpy()[rows["mol_id"]])
    smiles_of = tiny.notes["smiles_of"]
    assert list(rows["smiles"]) == [smiles_of[i] for i in rows["mol_id"]]
    assert np.isfinite(rows["y_pred"]).all()
    # any other rows belong to another set (validation), never a duplicate test row
    others = predictions[~predictions["set"].isin(["id", "ood"])]
    assert set(others["set"]) <= {"val"}
    assert not predictions.duplicated(["set", "mol_id"]).any()


@slow
def test_csv_and_tensorboard_loggers_write_their_files(tiny: TinyTask) -> None:
    run = run_dir(tiny, "mlp")
    log = pd.read_csv(run / "csv" / "metrics.csv")
    assert sorted(log.dropna(subset=["val_loss"])["epoch"].unique()) == [0, 1]
    tested = log.dropna(subset=["test/ood/rmse"])
    assert len(tested) == 1
    assert same_number(float(tested["test/ood/rmse"].iloc[0]), metrics_of(run)["ood"]["rmse"])
    stretched = float(tested["test/stretched/ood/rmse"].iloc[0])
    assert same_number(stretched, metrics_of(run)["stretched"]["ood"]["rmse"])
    events = list((run / "tensorboard").rglob("events.out.tfevents.*"))
    assert events and all(e.stat().st_size > 0 for e in events)


# ------------------------------------------------------------- 2. determinism, one split


@slow
def test_same_seed_gives_identical_predictions(tiny: TinyTask) -> None:
    first, second = run_dir(tiny, "mlp"), run_dir(tiny, "mlp_again")
    pd.testing.assert_frame_equal(
        pd.read_csv(first / "predictions.csv"), pd.read_csv(second / "predictions.csv")
    )
    a, b = metrics_of(first), metrics_of(second)
    assert (a["id"], a["ood"]) == (b["id"], b["ood"])


@slow
def test_every_model_uses_the_same_split(tiny: TinyTask) -> None:
    hashes = {m: metrics_of(run_dir(tiny, m))["split_hash"] for m in ("mlp", "rf")}
    assert hashes["mlp"] == hashes["rf"] == tiny.notes["split"].hash
    split_files = list((tiny.data_dir / "splits" / TASK_NAME).glob("ood-*.json"))
    assert len(split_files) == 1
    assert json.loads(split_files[0].read_text())["hash"] == hashes["mlp"]


# --------------------------------------------------------------------------- 3. resume


def _checkpoint(path: Path) -> dict:
    import torch

    return torch.load(path, map_location="cpu", weights_only=True)


@slow
def test_training_goes_on_from_a_checkpoint_in_a_folder_of_its_own(tiny: TinyTask) -> None:
    """A 1-epoch run continued with ckpt_path and max_epochs=2 trains only the second
    epoch, into its own folder; the first run's folder is left as it was."""
    tiny.result("one_epoch").ok()
    longer = run_dir(tiny, "longer")
    before = _checkpoint(tiny.root / "after_one_epoch.ckpt")
    after = _checkpoint(longer / "checkpoints" / "last.ckpt")
    assert before["epoch"] == 0 and before["global_step"] > 0
    assert after["epoch"] == 1
    assert after["global_step"] == 2 * before["global_step"]
    log = pd.read_csv(longer / "csv" / "metrics.csv")
    assert sorted(log.dropna(subset=["val_loss"])["epoch"].unique()) == [1]
    metrics = metrics_of(longer)
    assert metrics["ood"]["n"] == OOD_SIZE
    training = metrics["training"]  # the checkpoint's history, then this run's attempt
    first, then = training["resumes"]
    assert first["resumed_from"] is None and first["epoch"] == 0
    assert then["resumed_from"] == str(tiny.root / "one_epoch" / "checkpoints" / "last.ckpt")
    assert then["epoch"] == 1 and training["resumed"]
    assert metrics["config_key"] != metrics_of(tiny.root / "one_epoch")["config_key"]
    assert not list((longer / "checkpoints").glob("*-v*.ckpt"))


@slow
def test_another_configuration_is_refused_in_a_finished_folder(tiny: TinyTask) -> None:
    """Continuing into the 1-epoch run's own folder would mix two configurations."""
    tiny.result("one_epoch").ok()
    stderr = tiny.result("longer_here").failed().stderr
    assert "holds a run of another configuration" in stderr
    assert metrics_of(tiny.root / "one_epoch")["training"]["max_epochs"] == 1


# ------------------------------------------------------------- 4. evaluate.py: checkpoint


@slow
def test_evaluate_checkpoint_reproduces_the_run(tiny: TinyTask) -> None:
    trained, scored = run_dir(tiny, "mlp"), run_dir(tiny, "eval_ckpt")
    a, b = metrics_of(trained), metrics_of(scored)
    assert (b["id"], b["ood"]) == (a["id"], a["ood"])
    assert (b["split_hash"], b["task"], b["model"]) == (a["split_hash"], a["task"], a["model"])
    assert b["checkpoint"].endswith("best.ckpt") and "checkpoint" not in a
    pd.testing.assert_frame_equal(
        scored_rows(pd.read_csv(scored / "predictions.csv")).reset_index(drop=True),
        scored_rows(pd.read_csv(trained / "predictions.csv")).reset_index(drop=True),
    )
    assert (scored / "parity.png").read_bytes()[:8] == PNG_MAGIC


# ------------------------------------------------------- 4. evaluate.py: external files


@slow
def test_evaluate_smiles_file_reports_coverage_and_scores_covered(tiny: TinyTask) -> None:
    notes = tiny.notes
    metrics = metrics_of(run_dir(tiny, "eval_smiles"))
    coverage = metrics["coverage"]
    assert coverage["rows"] == notes["smiles_rows"]
    assert coverage["unparseable_smiles"] == {"count": 1, "examples": [UNPARSEABLE]}
    assert coverage["not_in_task"] == {"count": 1, "examples": [NOT_IN_TASK]}
    assert coverage["not_in_test_sets"] == {"count": 1, "examples": [f"mol {notes['train_id']}"]}
    for name in ("id", "ood"):
        missing = notes["missing"][name]
        assert coverage[f"missing_{name}"] == {
            "count": len(missing),
            "examples": [f"mol {i}" for i in missing],
        }
    assert metrics["split_hash"] == notes["split"].hash
    assert metrics["model"] == "external"
    assert metrics["flags"] == ["external", "partial"]

    split, y_of, pred = notes["split"], notes["y_of"], notes["smiles_pred"]
    train_median = float(np.median([y_of[i] for i in split.sets["train"]]))
    assert same_number(metrics["train_median"], train_median)
    for name in ("id", "ood"):
        ids = [i for i in split.sets[name].tolist() if i not in notes["missing"][name]]
        y, p = np.array([y_of[i] for i in ids]), np.array([pred[i] for i in ids])
        expected = hand_metrics(y, p) | (hand_binned(y, p, train_median) if name == "ood" else {})
        for key, value in expected.items():
            assert same_number(metrics[name][key], value), (name, key, metrics[name][key], value)


@slow
def test_evaluate_mol_id_file(tiny: TinyTask) -> None:
    notes = tiny.notes
    metrics = metrics_of(run_dir(tiny, "eval_mol_id"))
    coverage = metrics["coverage"]
    assert coverage["unreadable_mol_id"] == {
        "count": 1,
        "examples": [f"line {notes['unreadable_line']}"],
    }
    # an id the task does not have is named (today as "not in the test sets")
    named = [e for k, v in coverage.items() if isinstance(v, dict) for e in v["examples"]]
    assert f"mol {UNKNOWN_MOL_ID}" in named
    assert coverage["missing_id"]["count"] == coverage["missing_ood"]["count"] == 0
    assert metrics["flags"] == ["external"]
    split, y_of, pred = notes["split"], notes["y_of"], notes["mol_id_pred"]
    for name in ("id", "ood"):
        ids = split.sets[name].tolist()
        expected = hand_metrics([y_of[i] for i in ids], [pred[i] for i in ids])
        for key, value in expected.items():
            assert same_number(metrics[name][key], value), (name, key)


@slow
def test_evaluate_refuses_a_molecule_predicted_twice(tiny: TinyTask) -> None:
    result = tiny.result("eval_duplicate").failed()
    assert "more than once" in result.stderr
    assert f"[{tiny.notes['duplicated']}]" in result.stderr
    assert not (tiny.root / "eval_duplicate" / "metrics.json").exists()


@slow
def test_evaluate_names_a_molecule_with_a_non_finite_prediction(tiny: TinyTask) -> None:
    result = tiny.result("eval_nan").failed()
    nan_id, line = tiny.notes["nan_id"], tiny.notes["nan_line"]
    named = f"line {line}: mol {nan_id} ({tiny.notes['smiles_of'][nan_id]}), ood set: "
    assert named + "y_pred 'nan' is not finite" in result.stderr
    assert not (tiny.root / "eval_nan" / "metrics.json").exists()


@slow
@pytest.mark.parametrize("job", ["eval_neither", "eval_both"])
def test_evaluate_needs_exactly_one_of_checkpoint_or_predictions(tiny: TinyTask, job) -> None:
    result = tiny.result(job).failed()
    assert "give exactly one of ckpt_path" in result.stderr


# ----------------------------------------------------------------------- 10. bad input


@slow
def test_unknown_model_lists_the_available_ones(tiny: TinyTask) -> None:
    result = tiny.result("bad_model").failed()
    assert result.returncode == 2
    [line] = result.stderr.splitlines()  # one line, no traceback
    assert line.startswith("[oodmol train] model=nope: there is no model 'nope'")
    options = line.split("the choices are ", 1)[1].split(" (configs/model")[0]
    assert {"mlp", "rf"} <= set(options.split(", "))


@slow
def test_hydra_mode_multirun_sweeps_as_the_flag_does(tiny: TinyTask) -> None:
    """hydra.mode=MULTIRUN, from a config or the command line, runs a sweep without
    --multirun: one run per seed."""
    tiny.result("mode_multirun").ok()
    records = (tiny.root / "swept").rglob("metrics.json")
    assert sorted(json.loads(r.read_text())["seed"] for r in records) == [0, 1]


def test_unknown_key_is_refused(tiny: TinyTask) -> None:
    result = tiny.result("bad_key").failed()
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert "nonsense=1: there is no setting 'nonsense'" in line
    assert "+nonsense=1" in line  # how to add a key on purpose


def test_non_finite_prediction_names_the_molecule() -> None:
    from oodmol.metrics.sets import compute_metrics
    from oodmol.predictions import SetPredictions

    def predictions(name, ids, smiles, pred):
        y = np.arange(len(ids), dtype=float)
        return SetPredictions(name, np.array(ids), np.array(smiles), y, np.array(pred, float))

    sets = {
        "id": predictions("id", [1, 2, 3], ["C", "CC", "CCC"], [0.0, 1.0, 2.0]),
        "ood": predictions("ood", [7, 42, 9, 5], ["CO", "CCO", "CCCO", "CN"],
                           [0.0, np.nan, 2.0, np.inf]),
    }  # fmt: skip
    with pytest.raises(ValueError, match="not finite") as error:
        compute_metrics(sets, train_median=1.0)
    message = str(error.value)
    assert "mol 42 (CCO)" in message and "mol 5 (CN)" in message
    assert "mol 7 " not in message and "mol 9 " not in message


# ------------------------------------------------------------- 11. the target scaler


@slow
def test_target_scaler_comes_from_the_training_set_and_travels(tiny: TinyTask) -> None:
    run = run_dir(tiny, "mlp")
    split = tiny.notes["split"]
    y = tiny.molecules["y"].to_numpy()  # mol id k is CSV row k
    y_train = y[split.sets["train"]]
    assert abs(y.mean() - y_train.mean()) > 1e-3, "the check must tell train from all data"
    state = _checkpoint(run / "checkpoints" / "best.ckpt")["state_dict"]
    assert float(state["y_mean"]) == pytest.approx(y_train.mean(), rel=1e-6)
    assert float(state["y_std"]) == pytest.approx(y_train.std(ddof=1), rel=1e-6)
    assert metrics_of(run)["train_median"] == pytest.approx(float(np.median(y_train)))


@slow
def test_checkpoint_carries_what_rebuilds_the_model(tiny: TinyTask) -> None:
    """The statistics the model was built from and the feature set's training state:
    a checkpoint is enough to read new molecules as the training ones were read."""
    saved = _checkpoint(run_dir(tiny, "mlp") / "checkpoints" / "best.ckpt")
    assert saved["oodmol_statistics"] == {"backbone.in_dim": 256}  # Morgan bits
    features = saved["oodmol_features"]
    assert set(features) == {"imputer_means", "mean", "scale"}
    assert features["mean"].shape == features["scale"].shape == (256,)
    assert "in_dim" not in saved["oodmol_config"]["model"]["module"]["backbone"]


# --------------------------------------------------------------- known bugs (xfail)


@slow
def test_random_forest_run_writes_best_checkpoint(tiny: TinyTask) -> None:
    tiny.result("rf").ok()
    assert (run_dir(tiny, "rf") / "checkpoints" / "best.ckpt").is_file()


@slow
def test_csv_task_trains_without_an_explicit_name(tiny: TinyTask) -> None:
    result = tiny.result("csv_default_name")
    result.ok()
    assert list((tiny.root / "project" / "runs").rglob("metrics.json"))
