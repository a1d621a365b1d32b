"""End to end: a run's life as a cluster gives it. Interrupted by a scheduler's signal and
resumed, it ends bit for bit where an uninterrupted run ends; a requeued job resumes by
itself; a finished folder is never trained into again, nor mixed with another
configuration's; a diverging training fails with a message and a failed metrics.json,
without stopping the other jobs of a multirun.

Every run is a 16-unit MLP with dropout and a per-epoch learning-rate schedule on the tiny
CSV task (6 batches an epoch, 4 epochs), so the random state and the data order matter.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch
from e2e_helpers import MORGAN, QUIET, RF, Result, TinyTask
from paths import HELPERS_PYTHONPATH

pytestmark = pytest.mark.slow

STEPS_PER_EPOCH = 6
MODEL = [
    "model=mlp",
    "model.module.backbone.hidden=[16]",
    "model.module.backbone.dropout=0.3",
    "model.batch_size=16",
    "model.max_epochs=4",
    "model.module.scheduler={_target_:torch.optim.lr_scheduler.ExponentialLR,"
    "_partial_:true,gamma:0.7}",
    "logger=many",
    *MORGAN,
]
HELPERS = {"PYTHONPATH": HELPERS_PYTHONPATH}
# as configs/hparams_search/chemprop_random.yaml lets a trial fail, over two learning
# rates: the random sampler with seed 0 draws 1e30, 1e-3, 1e30 (Optuna's grid sampler
# cannot end on a failed trial: it raises "Study.stop is supposed to be invoked ...")
SEARCH = """# @package _global_
defaults:
  - override /hydra/sweeper: optuna
  - override /hydra/sweeper/sampler: random
optimized_metric: val_loss
hydra:
  sweep:
    subdir: ${hydra:job.num}
  sweeper:
    direction: minimize
    n_trials: 3
    n_jobs: 1
    max_failure_rate: 1.0
    sampler:
      seed: 0
    params:
      model.module.optimizer.lr: choice(1e-3, 1e30)
"""


def fault(step: int, signal: str) -> list[str]:
    return [
        "+callbacks.fault._target_=fault_helpers.SignalAtStep",
        f"+callbacks.fault.step={step}",
        f"+callbacks.fault.signal={signal}",
    ]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory):
    task = TinyTask.create(tmp_path_factory.mktemp("lifecycle"))
    root = task.root

    def train(folder: str, *args: str) -> list[str]:
        return [
            "train.py",
            *task.task_args(),
            *QUIET,
            *MODEL,
            *args,
            f"hydra.run.dir={root / folder}",
        ]

    def run(command: list[str], **env: str) -> Result:
        return task.run(command, env={**HELPERS, **env})

    rf_run = ["train.py", *task.task_args(), *QUIET, *RF]
    reference_last = root / "reference" / "checkpoints" / "last.ckpt"
    task.submit_chain(
        ("reference", train("reference")),
        ("again", train("reference")),
        (
            "wrong_checkpoint",
            [*rf_run, f"ckpt_path={reference_last}", f"hydra.run.dir={root / 'wrong'}"],
        ),
    )
    # stopped in the middle of epoch 1 by SIGTERM, refused without resume=true, resumed
    mid = [*fault(9, "SIGTERM")]
    task.submit_chain(
        ("mid_stopped", lambda: run(train("mid", *mid))),
        ("mid_refused", lambda: run(train("mid", *mid))),
        ("mid_resumed", lambda: run(train("mid", *mid, "resume=true"), FAULT_HELPERS_OFF="1")),
    )
    # stopped by SLURM's warning signal at the last batch of epoch 1 (Lightning finishes
    # that epoch first: its validation and its last.ckpt), resumed as a requeued job,
    # without resume=true
    edge = [*fault(2 * STEPS_PER_EPOCH, "SIGUSR1")]
    task.submit_chain(
        ("edge_stopped", lambda: run(train("edge", *edge))),
        (
            "edge_requeued",
            lambda: run(train("edge", *edge), SLURM_RESTART_COUNT="1", FAULT_HELPERS_OFF="1"),
        ),
    )
    # an outside tool's handler (submitit's requeue) runs once last.ckpt is on disk
    record = root / "foreign.json"
    foreign = [
        *fault(9, "SIGUSR2"),
        "+callbacks.foreign._target_=fault_helpers.ForeignHandler",
        "+callbacks.foreign.signal=SIGUSR2",
        f"+callbacks.foreign.record={record}",
        f"+callbacks.foreign.checkpoint={root / 'foreign' / 'checkpoints' / 'last.ckpt'}",
    ]
    task.submit("foreign", lambda: run(train("foreign", *foreign)))
    task.notes["foreign_record"] = record
    # last.ckpt after every epoch, even when the selecting checkpoint keeps an early one
    task.submit("worst_selected", train("worst_selected", "callbacks.model_checkpoint.mode=max"))
    # a diverging training, alone and in a multirun beside a healthy one
    task.submit("diverged", train("diverged", "model.module.optimizer.lr=1e30"))
    sweep = [
        "train.py", "-m", *task.task_args(), *QUIET, *MODEL,
        "model.module.optimizer.lr=1e-3,1e30", f"hydra.sweep.dir={root / 'sweep'}",
    ]  # fmt: skip
    task.submit("sweep", sweep)
    # a search whose second trial diverges: the search goes on and picks the first
    searches = root / "search_configs" / "hparams_search"
    searches.mkdir(parents=True)
    (searches / "mlp_lr.yaml").write_text(SEARCH)
    search = [
        "train.py", "-m", f"--config-dir={searches.parent}", "hparams_search=mlp_lr",
        *task.task_args(), *QUIET, *MODEL, f"hydra.sweep.dir={root / 'search'}",
    ]  # fmt: skip
    task.submit("search", search)
    # the OOD-trajectory diagnostic: the same training, and a last row that is the last
    # epoch's own test error
    diagnosed_last = root / "diagnosed" / "checkpoints" / "last.ckpt"
    rescore = [
        "evaluate.py", f"ckpt_path={diagnosed_last}", "progress=false",
        f"hydra.run.dir={root / 'diagnosed_last'}",
    ]  # fmt: skip
    task.submit_chain(
        ("diagnosed", train("diagnosed", "callbacks=diagnostics")),
        ("diagnosed_last", rescore),
    )
    # the objective of a search, looked up by name
    task.submit("objective", train("objective", "optimized_metric=val_rmse"))
    task.submit("unknown_objective", train("unknown_objective", "optimized_metric=val_nope"))
    yield task
    task.close()


def metrics_of(folder: Path) -> dict:
    return json.loads((folder / "metrics.json").read_text())


def checkpoint(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def assert_same_results(folder: Path, reference: Path) -> None:
    """Predictions bit for bit, and the CSV log row for row, of two finished runs."""
    for name in ("predictions.csv", "csv/metrics.csv"):
        assert (folder / name).read_bytes() == (reference / name).read_bytes(), name
    assert metrics_of(folder)["ood"] == metrics_of(reference)["ood"]


def tensorboard_scalars(folder: Path, tag: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder / "tensorboard"), purge_orphaned_data=True)
    events.Reload()
    return [(e.step, e.value) for e in events.Scalars(tag)]


# ------------------------------------------------------------------ 1. resume is exact


def test_resumed_run_equals_the_uninterrupted_one(runs: TinyTask) -> None:
    stopped = runs.result("mid_stopped")
    assert stopped.returncode == 143, stopped.output()
    assert "stopped by SIGTERM" in stopped.stdout
    assert f"hydra.run.dir={runs.root / 'mid'} resume=true" in stopped.stdout
    runs.result("mid_resumed").ok()
    mid, reference = runs.root / "mid", runs.root / "reference"
    runs.result("reference").ok()
    assert_same_results(mid, reference)
    assert tensorboard_scalars(mid, "val_loss") == tensorboard_scalars(reference, "val_loss")


def test_stop_saves_the_position_inside_the_epoch(runs: TinyTask) -> None:
    runs.result("mid_resumed").ok()
    training = metrics_of(runs.root / "mid")["training"]
    assert training["attempts"] == 2 and training["resumed"]
    first, second = training["resumes"]
    assert first["resumed_from"] is None
    assert second["resumed_from"].endswith("mid/checkpoints/last.ckpt")
    assert (second["epoch"], second["step"]) == (1, 9)  # in the middle of epoch 1
    total = metrics_of(runs.root / "mid")["train_seconds"]
    assert total == pytest.approx(first["seconds"] + second["seconds"])


def test_interrupted_folder_is_left_alone_without_resume(runs: TinyTask) -> None:
    refused = runs.result("mid_refused")
    assert refused.returncode == 2, refused.output()
    assert "holds an interrupted run of this configuration" in refused.stderr
    assert "epoch 1, step 9" in refused.stderr and "resume=true" in refused.stderr


def test_requeued_job_resumes_from_the_last_finished_epoch(runs: TinyTask) -> None:
    stopped = runs.result("edge_stopped")
    assert stopped.returncode == 128 + 10, stopped.output()  # SIGUSR1
    assert "holds the last finished epoch" in stopped.stdout
    runs.result("edge_requeued").ok()
    runs.result("reference").ok()
    assert_same_results(runs.root / "edge", runs.root / "reference")
    resumes = metrics_of(runs.root / "edge")["training"]["resumes"]
    assert (resumes[1]["epoch"], resumes[1]["step"]) == (2, 2 * STEPS_PER_EPOCH)


def test_outside_handler_runs_once_the_checkpoint_is_saved(runs: TinyTask) -> None:
    result = runs.result("foreign")
    assert result.returncode == 128 + 12, result.output()  # SIGUSR2
    seen = json.loads(runs.notes["foreign_record"].read_text())
    assert seen == {"signal": 12, "checkpoint_on_disk": True}
    saved = checkpoint(runs.root / "foreign" / "checkpoints" / "last.ckpt")
    assert saved["global_step"] == 9


def test_last_checkpoint_is_written_after_every_epoch(runs: TinyTask) -> None:
    folder = runs.root / "worst_selected"
    runs.result("worst_selected").ok()
    last, best = (checkpoint(folder / "checkpoints" / f"{n}.ckpt") for n in ("last", "best"))
    assert best["epoch"] < 3  # the selecting checkpoint kept an earlier epoch,
    assert last["epoch"] == 3  # yet last.ckpt holds the last one
    assert last["global_step"] == 4 * STEPS_PER_EPOCH


def test_checkpoint_of_another_run_is_refused_naming_both(runs: TinyTask) -> None:
    stderr = runs.result("wrong_checkpoint").failed().stderr
    assert "was written by a run of task=tiny split=ood model=mlp seed=0" in stderr
    assert "this run is task=tiny split=ood model=rf seed=0" in stderr
    assert "they differ in model" in stderr
    assert not (runs.root / "wrong" / "metrics.json").exists()


# ---------------------------------------------------------- 4. one folder, one run


def test_finished_run_is_not_trained_again(runs: TinyTask) -> None:
    runs.result("reference").ok()
    again = runs.result("again").ok()
    assert "already holds this run, complete" in again.stdout
    assert "ID RMSE" in again.stdout
    log = pd.read_csv(runs.root / "reference" / "csv" / "metrics.csv")
    assert sorted(log.dropna(subset=["val_loss"])["epoch"].unique()) == [0, 1, 2, 3]


# ------------------------------------------------------------------- 6. divergence


def test_diverged_training_fails_with_a_message_and_a_failed_status(runs: TinyTask) -> None:
    result = runs.result("diverged")
    assert result.returncode == 1, result.output()
    assert "run failed: training diverged at epoch 0" in result.stderr
    assert "Traceback" not in result.stderr
    metrics = metrics_of(runs.root / "diverged")
    assert metrics["status"] == "failed"
    assert metrics["failure"]["kind"] == "TrainingDiverged"
    assert "id" not in metrics and "ood" not in metrics


def test_failed_job_does_not_stop_the_multirun(runs: TinyTask) -> None:
    result = runs.result("sweep")
    assert result.returncode != 0, result.output()  # the sweep reports its failure
    found = [metrics_of(p.parent) for p in (runs.root / "sweep").rglob("metrics.json")]
    statuses = sorted((m["status"], m.get("failure", {}).get("kind")) for m in found)
    assert statuses == [("complete", None), ("failed", "TrainingDiverged")]
    # the sweep's last words name the failed job, whichever launcher ran it
    summary = result.stdout[result.stdout.index("[oodmol] sweep ") :]
    assert "2 jobs, 1 complete, 1 failed" in summary
    assert "FAILED: model.module.optimizer.lr=1e+30\n" in summary
    assert "reason: TrainingDiverged: training diverged at epoch 0" in summary


def test_failed_trial_does_not_stop_the_search(runs: TinyTask) -> None:
    runs.result("search").ok()
    out = runs.root / "search"
    best = (out / "optimization_results.yaml").read_text()
    assert "model.module.optimizer.lr: 0.001" in best
    trials = sorted(metrics_of(p.parent)["status"] for p in out.rglob("metrics.json"))
    assert trials == ["complete", "failed", "failed"]


# ------------------------------------------------- 8. the objective, looked up by name


def test_objective_is_the_named_metric_at_the_selected_epoch(runs: TinyTask) -> None:
    runs.result("objective").ok()
    folder = runs.root / "objective"
    objective = metrics_of(folder)["objective"]
    log = pd.read_csv(folder / "csv" / "metrics.csv").dropna(subset=["val_loss"])
    selected = log.loc[log["val_loss"].idxmin()]
    assert objective == {
        "name": "val_rmse",
        "value": pytest.approx(selected["val_rmse"], rel=1e-6),
        "epoch": int(selected["epoch"]),
    }


def test_unknown_objective_names_the_logged_metrics(runs: TinyTask) -> None:
    stderr = runs.result("unknown_objective").failed().stderr
    assert "optimized_metric=val_nope is not a logged validation metric" in stderr
    assert "'val_loss', 'val_rmse'" in stderr


# -------------------------------------------------- the OOD-trajectory diagnostic


def test_trajectory_diagnostic_changes_nothing_and_scores_every_epoch(runs: TinyTask) -> None:
    runs.result("reference").ok()
    runs.result("diagnosed").ok()
    folder = runs.root / "diagnosed"
    assert_same_results(folder, runs.root / "reference")
    assert metrics_of(folder)["config_key"] == metrics_of(runs.root / "reference")["config_key"]
    lines = (folder / "ood_trajectory.csv").read_text().splitlines()
    assert lines[0].startswith("# diagnostic only") and "never use them to choose" in lines[0]
    trajectory = pd.read_csv(folder / "ood_trajectory.csv", comment="#")
    assert trajectory["epoch"].tolist() == [0, 1, 2, 3]
    runs.result("diagnosed_last").ok()  # evaluate.py on the run's last.ckpt
    last = metrics_of(runs.root / "diagnosed_last")
    assert trajectory["ood_rmse"].iloc[-1] == pytest.approx(last["ood"]["rmse"], rel=1e-6)
    assert trajectory["id_rmse"].iloc[-1] == pytest.approx(last["id"]["rmse"], rel=1e-6)
    assert (folder / "ood_trajectory.png").is_file()
    assert "ood_rmse" not in (folder / "csv" / "metrics.csv").read_text()  # never logged
