"""End to end, scaled out: Hydra multiruns (basic, joblib and submitit launchers), the
leaderboard over a sweep, Lightning DDP on two CPU processes, and the wandb logger
offline, on the same tiny CSV task as test_train_e2e.py.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from e2e_helpers import (
    MLP,
    MORGAN,
    OOD_SIZE,
    QUIET,
    TASK_NAME,
    TinyTask,
    hand_binned,
    hand_metrics,
    same_number,
    scored_rows,
)

pytestmark = pytest.mark.slow
LAUNCHERS = {
    "joblib": ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"],
    "submitit": ["hydra/launcher=submitit_local", "hydra.launcher.timeout_min=5"],
}


@pytest.fixture(scope="module")
def scale(tmp_path_factory: pytest.TempPathFactory):
    task = TinyTask.create(tmp_path_factory.mktemp("scale_out"))
    root = task.root
    common = [*task.task_args(), *QUIET]
    # both models take these; each keeps its own width / number of trees
    sweep = ["train.py", "-m", "model=mlp,rf", *common, *MORGAN, "model.max_epochs=2"]

    board = ["-m", "oodmol.cli", "report", str(root / "sweep_basic"), "--out", str(root / "board")]
    task.submit_chain(
        ("basic", [*sweep, f"hydra.sweep.dir={root / 'sweep_basic'}"]), ("report", board)
    )
    task.submit(
        "ddp",
        [
            "train.py",
            *common,
            *MLP,
            "trainer=ddp",
            "trainer.accelerator=cpu",
            "trainer.devices=2",
            f"hydra.run.dir={root / 'ddp'}",
        ],
    )
    for name, launcher in LAUNCHERS.items():
        task.submit(name, [*sweep, *launcher, f"hydra.sweep.dir={root / f'sweep_{name}'}"])
    wandb_home = str(root / "wandb_home")
    offline = {"WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    offline |= {f"WANDB_{k}": wandb_home for k in ("DIR", "CACHE_DIR", "CONFIG_DIR", "DATA_DIR")}
    wandb_run = ["train.py", *common, *MLP, "logger=wandb", f"hydra.run.dir={root / 'wandb'}"]
    task.submit("wandb", wandb_run, env=offline)
    wandb_sweep = [*sweep, "logger=wandb", f"hydra.sweep.dir={root / 'sweep_wandb_sweep'}"]
    task.submit("wandb_sweep", wandb_sweep, env=offline)
    yield task
    task.close()


def sweep_runs(scale: TinyTask, name: str) -> dict[str, Path]:
    """model name -> run folder of a finished sweep (which must have succeeded)."""
    scale.result(name).ok()
    sweep_dir = scale.root / f"sweep_{name}"
    runs = {}
    for path in sorted(sweep_dir.rglob("metrics.json")):
        model = json.loads(path.read_text())["model"]
        assert model not in runs, f"two runs of {model} in {sweep_dir}"
        runs[model] = path.parent
    return runs


def metrics_of(folder: Path) -> dict:
    return json.loads((folder / "metrics.json").read_text())


# ------------------------------------------------------------------- 5. basic multirun


def test_multirun_writes_one_run_folder_per_job(scale: TinyTask) -> None:
    runs = sweep_runs(scale, "basic")
    assert set(runs) == {"mlp", "rf"}
    sweep_dir = scale.root / "sweep_basic"
    for model, folder in runs.items():
        # docs/guide/running.md: runs/<task>/<split>/<model>/<configuration key>/<seed>, below the
        # sweep folder
        metrics = metrics_of(folder)
        key = metrics["config_key"]
        assert folder.relative_to(sweep_dir).parts == (TASK_NAME, "ood", model, key, "0")
        assert metrics["ood"]["n"] == OOD_SIZE
        assert (folder / "predictions.csv").is_file()
    assert len({metrics_of(f)["split_hash"] for f in runs.values()}) == 1


def test_report_over_the_sweep_names_both_models(scale: TinyTask) -> None:
    scale.result("report").ok()
    board = scale.root / "board"
    table = (board / "rmse.md").read_text()
    assert "mlp" in table and "rf" in table
    runs = pd.read_csv(board / "runs.csv")
    assert sorted(runs["model_name"]) == ["mlp", "rf"]
    # the sweep shortens both models' epoch budgets: flagged, never taken for full runs
    assert sorted(runs["model"]) == ["mlp [shortened]", "rf [shortened]"]
    assert (board / "heatmap.png").is_file()


# ------------------------------------------------------------- 6.–7. parallel launchers


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_parallel_launcher_reproduces_the_basic_sweep(scale: TinyTask, launcher: str) -> None:
    """Each job really ran (in a joblib worker / a pickled submitit job), with the same
    config: its predictions equal those of the basic launcher's job."""
    runs, reference = sweep_runs(scale, launcher), sweep_runs(scale, "basic")
    assert set(runs) == {"mlp", "rf"}
    for model, folder in runs.items():
        pd.testing.assert_frame_equal(
            pd.read_csv(folder / "predictions.csv"),
            pd.read_csv(reference[model] / "predictions.csv"),
        )
        assert metrics_of(folder)["split_hash"] == metrics_of(reference[model])["split_hash"]
    if launcher == "submitit":  # the jobs went through submitit's own files
        assert list((scale.root / "sweep_submitit" / ".submitit").rglob("*_result.pkl"))


# ------------------------------------------------------------------------------ 8. DDP


def test_ddp_on_two_cpu_processes_scores_each_molecule_once(scale: TinyTask) -> None:
    result = scale.result("ddp").ok()
    assert "MEMBER: 2/2" in result.stdout + result.stderr  # two processes did train
    run = scale.root / "ddp"
    assert list(run.rglob("metrics.json")) == [run / "metrics.json"]
    assert not list(scale.root.glob("project/**/metrics.json"))  # none in the default folder
    metrics = metrics_of(run)
    sizes = metrics["data"]["sizes"]
    assert metrics["id"]["n"] == sizes["id"]
    assert metrics["ood"]["n"] == sizes["ood"] == OOD_SIZE
    predictions = pd.read_csv(run / "predictions.csv")
    assert not predictions.duplicated(["set", "mol_id"]).any()
    rows = scored_rows(predictions)
    assert not rows["mol_id"].duplicated().any()
    assert rows["set"].value_counts().to_dict() == {"id": sizes["id"], "ood": sizes["ood"]}
    ood = rows[rows["set"] == "ood"]
    expected = hand_metrics(ood["y_true"], ood["y_pred"])
    expected |= hand_binned(ood["y_true"], ood["y_pred"], metrics["train_median"])
    for key, value in expected.items():
        assert same_number(metrics["ood"][key], value), key


# ---------------------------------------------------------------------------- 9. wandb


def wandb_records(path: Path):
    """The records of a wandb transaction log (`run-<id>.wandb`): a 7-byte file header,
    then LevelDB-log framing (32 KiB blocks; 7-byte record headers: crc, length, type
    full/first/middle/last) around protobuf `Record`s. Offline runs of recent wandb
    versions keep the summary only here (files/wandb-summary.json appears on sync)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a wandb transaction log"
    block, pos, pending = 32768, 7, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # block trailer
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if (length, kind) == (0, 0):  # zero padding up to the block end
            pos += left
            continue
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind in (1, 2):
            pending = chunk
        else:
            pending += chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            yield record


def test_wandb_offline_run_holds_the_test_summary(scale: TinyTask) -> None:
    scale.result("wandb").ok()
    run = scale.root / "wandb"
    offline = list((run / "wandb").glob("offline-run-*"))
    assert len(offline) == 1, list((run / "wandb").iterdir())
    logs = list(offline[0].glob("run-*.wandb"))
    assert len(logs) == 1
    summary, kinds = {}, set()
    for record in wandb_records(logs[0]):
        kind = record.WhichOneof("record_type")
        kinds.add(kind)
        if kind == "summary":
            for item in record.summary.update:
                key = item.key or "/".join(item.nested_key)
                summary[key] = json.loads(item.value_json)
    assert {"run", "history", "summary", "exit"} <= kinds  # a complete, syncable run
    metrics = metrics_of(run)
    for name in ("id", "ood"):
        for key in ("rmse", "mae", "r2"):
            assert same_number(summary[f"test/{name}/{key}"], metrics[name][key]), (name, key)
    assert np.isfinite(summary["val_loss"])
    media = offline[0] / "files" / "media"
    assert list(media.glob("images/parity*.png"))
    assert list(media.glob("table/predictions*.table.json"))


def test_wandb_multirun_gives_each_job_its_own_run(scale: TinyTask) -> None:
    scale.result("wandb_sweep").ok()
    runs = sweep_runs(scale, "wandb_sweep")
    assert set(runs) == {"mlp", "rf"}
    for model, folder in runs.items():
        assert len(list((folder / "wandb").glob("offline-run-*"))) == 1, model
