"""train.py with every uncertainty method, end to end on a tiny CSV task (Morgan bits, a
16-unit MLP, two epochs), in this process, and the run folders Hydra gives them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
import pytest
from door_helpers import shared_doors
from hydra import compose, initialize_config_dir
from paths import HELPERS_PYTHONPATH, REPO

from oodmol.cli import main
from oodmol.config import compose_config
from oodmol.identity import config_key
from oodmol.training.members import run_members
from oodmol.training.run import train as train_one

pytestmark = pytest.mark.slow

ROOT = REPO
QUICK = [
    "model.featurizer._target_=oodmol.data.featurize.fingerprints.MorganFingerprint",
    "+model.featurizer.n_bits=64",
    "threads=1",
    "progress=false",
    "logger=csv",
    "trainer.log_every_n_steps=1",
]
FAST = [
    "model=mlp",
    "model.max_epochs=2",
    "model.batch_size=32",
    "model.module.backbone.hidden=[16]",
    *QUICK,
]
# a fixed task name for the run folders (`++`: add or override)
CSV_TASK = ["task=csv", "task.target_column=y", "++task.name=csv-tiny-y"]
Train = Callable[..., Path]


def tiny_csv(path: Path) -> Path:
    """120 chains CₙX (X = C, O, N) with a target that grows with n."""
    rows = ["smiles,y"]
    for n in range(1, 41):
        for end, shift in (("", 0.0), ("O", 0.3), ("N", -0.2)):
            rows.append(f"{'C' * n}{end},{0.1 * n + shift + 0.05 * ((7 * n) % 5)}")
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.fixture(scope="module")
def train(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Train]:
    """`train(name, *overrides)` runs train.py's work (`oodmol.training.run.train`; a
    tiny MLP unless the overrides say otherwise) into <tmp>/<name>; the task's data and
    feature caches are shared."""
    root = tmp_path_factory.mktemp("uq_train")
    csv = tiny_csv(root / "tiny.csv")

    def run(name: str, *overrides: str, model: list[str] = FAST) -> Path:
        out = root / name
        cfg = compose_config(
            "train",
            [
                *CSV_TASK,
                f"task.path={csv}",
                f"paths.data_dir={root / 'data'}",
                f"paths.output_dir={out}",
                *model,
                *overrides,
            ],
        )
        run_members(cfg, train_one)
        return out

    run.root = root  # type: ignore[attr-defined]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OODMOL_DATA_DIR", str(root / "data"))
        yield run


def metrics_of(folder: Path) -> dict:
    return json.loads((folder / "metrics.json").read_text())


def check_uq_outputs(folder: Path, method: str, kinds: set[str]) -> dict:
    metrics = metrics_of(folder)
    assert metrics["uq"]["method"] == method
    for s in ("id", "ood"):
        assert set(metrics["uq"][s]) == kinds
        assert {"nll", "ence", "coverage_95", "auco", "cv"} <= set(metrics["uq"][s]["total"])
    assert metrics["uq_recalibrated"]["zscaling"]["factor"] > 0
    assert "coverage_95" in metrics["uq_recalibrated"]["conformal"]["ood"]
    for figure in ("calibration", "error_calibration", "confidence", "parity"):
        assert (folder / f"{figure}.png").is_file()
    frame = pd.read_csv(folder / "predictions.csv")
    assert set(frame["set"]) == {"id", "ood", "val"}
    assert {f"y_std_{k}" for k in kinds - {"total"}} | {"y_std"} <= set(frame.columns)
    return metrics


def test_ensemble_members_multirun_twin_and_leaderboard(train: Train, tmp_path: Path):
    run = train("ensemble", "uq=ensemble", "uq.members=2")
    metrics = check_uq_outputs(run, "ensemble", {"total", "epistemic"})
    assert metrics["uq"]["members"] == 2 and metrics["seed"] == 0
    for k in (0, 1):
        member = run / "members" / str(k)
        assert (member / "checkpoints" / "best.ckpt").is_file()
        assert metrics_of(member)["uq"]["member"] == k
    # member 1 trained alone (as in a multirun) gives the same predictions
    alone = train("member1", "uq=ensemble", "uq.member=1")
    pd.testing.assert_frame_equal(
        pd.read_csv(alone / "predictions.csv"),
        pd.read_csv(run / "members" / "1" / "predictions.csv"),
    )
    # the leaderboard: a uq table, and members are parts of runs, not runs
    assert main(["report", str(run.parent), "--out", str(tmp_path)]) == 0
    assert "mlp+ensemble" in set(pd.read_csv(tmp_path / "uq.csv")["model"])
    assert "ENCE" in (tmp_path / "uq.md").read_text()
    assert list(pd.read_csv(tmp_path / "runs.csv")["model"]) == ["mlp+ensemble"]


def test_members_side_by_side_are_the_members_trained_in_turn(train: Train):
    """uq.parallel=2 trains both members at once, each a train.py process of its own on
    one of the run's two threads: their predictions and the combined run's metrics are
    those of the members trained one after the other on one thread."""
    in_turn = train("in_turn", "uq=ensemble", "uq.members=2")
    root = in_turn.parent
    out = root / "side_by_side"
    quick = [o for o in FAST if not o.startswith("threads=")]
    command = [
        "train.py", *CSV_TASK, f"task.path={root / 'tiny.csv'}",
        f"paths.data_dir={root / 'data'}", *quick, "uq=ensemble", "uq.members=2",
        "uq.parallel=2", "threads=2", f"hydra.run.dir={out}",
    ]  # fmt: skip
    done = shared_doors().run(command, env=dict(os.environ), timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "2 members, 2 at a time, 1 thread(s) each" in done.stdout
    for k in (0, 1):
        assert (out / "members" / f"{k}.log").is_file()
        pd.testing.assert_frame_equal(
            pd.read_csv(out / "members" / str(k) / "predictions.csv"),
            pd.read_csv(in_turn / "members" / str(k) / "predictions.csv"),
        )
    # run again: each member finds its folder done (member 1 with its own seed, 1000)
    again = shared_doors().run(command, env=dict(os.environ), timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    for k in (0, 1):
        assert "already holds this run, complete" in (out / "members" / f"{k}.log").read_text()
    together, alone = metrics_of(out), metrics_of(in_turn)
    assert together["config_key"] == alone["config_key"]
    assert together["ood"] == alone["ood"]
    where = {"member_dirs"}  # the folders, the one thing that differs
    assert {k: v for k, v in together["uq"].items() if k not in where} == {
        k: v for k, v in alone["uq"].items() if k not in where
    }


def test_a_member_that_fails_side_by_side_ends_the_run_with_its_own_line(train: Train):
    """The members read the data, not the run that starts them: a column the file lacks
    fails both, and the run ends with member 0's line and exit status, whichever ends first."""
    root = train.root  # type: ignore[attr-defined]
    tiny = tiny_csv(root / "tiny_for_failure.csv")
    quick = [o for o in FAST if not o.startswith("threads=")]
    command = [
        "train.py", "task=csv", "task.target_column=nope",
        "++task.name=csv-tiny-nope", f"task.path={tiny}", f"paths.data_dir={root / 'data'}",
        *quick, "uq=ensemble", "uq.members=2", "uq.parallel=2",
        f"hydra.run.dir={root / 'failing'}",
    ]  # fmt: skip
    done = shared_doors().run(command, env=dict(os.environ), timeout=600)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 2, done.stderr[-2000:]
    assert last.startswith("[oodmol train] member 0 failed (exit 2): [oodmol train]"), last
    assert "nope" in last and "see " in last and "Traceback" not in done.stderr


def test_a_stopped_side_by_side_run_goes_on_from_each_members_last_checkpoint(train: Train):
    """SIGTERM to a run whose members train side by side reaches both: each saves its
    last checkpoint, the run ends with one line and 143, and the same command with
    resume=true goes on from both checkpoints to the end. Each member stands still at the
    start of its second epoch (its first epoch's checkpoint saved), as a long training
    would still be running, until the signal comes."""
    root = train.root  # type: ignore[attr-defined]
    out, go = root / "stopped", root / "stopped.go"
    quick = [o for o in FAST if not o.startswith("threads=")]
    command = [
        sys.executable, "train.py", *CSV_TASK, f"task.path={root / 'tiny.csv'}",
        f"paths.data_dir={root / 'data'}", *quick,
        "uq=ensemble", "uq.members=2", "uq.parallel=2", "threads=2", f"hydra.run.dir={out}",
        "+callbacks.hold._target_=fault_helpers.WaitForFile", f"+callbacks.hold.path={go}",
        "+callbacks.hold.epoch=1",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": HELPERS_PYTHONPATH}
    members = [out / "members" / str(k) for k in (0, 1)]
    run = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 300
    while not all((m / "checkpoints" / "last.ckpt").is_file() for m in members):
        assert run.poll() is None and time.monotonic() < deadline, run.communicate()[1][-2000:]
        time.sleep(0.1)
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=600)
    last = err.decode().strip().splitlines()[-1]
    assert run.returncode == 143, err[-2000:]
    assert "interrupted by SIGTERM while training 2 members side by side" in last, last
    assert "Traceback" not in err.decode()
    assert not any((m / "metrics.json").exists() for m in members)

    go.touch()  # the resumed members do not stand still
    resumed = subprocess.run(
        [*command, "resume=true"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    for member in members:
        training = json.loads((member / "metrics.json").read_text())["training"]
        assert training["resumed"] and training["attempts"] == 2, training
        assert training["resumes"][-1]["resumed_from"].endswith("last.ckpt"), training


def test_bootstrap_members_train_on_different_resamples(train: Train):
    run = train("bootstrap", "uq=bootstrap", "uq.members=2")
    check_uq_outputs(run, "bootstrap", {"total", "epistemic"})
    predictions = [pd.read_csv(run / "members" / str(k) / "predictions.csv") for k in (0, 1)]
    assert not predictions[0]["y_pred"].equals(predictions[1]["y_pred"])


def test_mean_variance(train: Train):
    run = train("mve", "uq=mve")
    check_uq_outputs(run, "mve", {"total", "aleatoric"})
    assert not (run / "members").exists()


@pytest.mark.parametrize("method", ["mc_dropout", "concrete_dropout"])
def test_mc_dropout(train: Train, method: str):
    run = train(method, f"uq={method}", "uq.estimator.test_passes=5")
    check_uq_outputs(run, method, {"total", "epistemic"})


def test_forest_spread_is_scored_and_mve_is_refused(train: Train):
    rf = ["model=rf", "model.module.n_estimators=5", "model.module.n_jobs=1"]
    run = train("rf", model=[*rf, *QUICK])
    check_uq_outputs(run, "native", {"total", "epistemic"})
    with pytest.raises(ValueError, match="RandomForestModule"):
        train("rf_mve", "uq=mve", model=[*rf, *QUICK])


def test_run_folders_name_the_method_and_the_member(tmp_path: Path):
    """hydra/default.yaml: runs/<task>/<split>/<model>+<uq>/<key>/<seed>[/members/<k>],
    the key shared by the seeds and members of one configuration."""
    csv = tmp_path / "x.csv"
    csv.write_text("smiles,y\nCCO,1.0\n")
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        for overrides, (model, tail) in (
            ([], ("mlp", "0")),
            (["uq=mve"], ("mlp+mve", "0")),
            (["uq=bootstrap", "uq.member=3", "seed=2"], ("mlp+bootstrap", "2/members/3")),
        ):
            cfg = compose(
                "train", [*CSV_TASK, f"task.path={csv}", *overrides], return_hydra_config=True
            )
            key = config_key(cfg)
            assert cfg.hydra.run.dir.endswith(f"/csv-tiny-y/ood/{model}/{key}/{tail}")
            assert cfg.hydra.sweep.subdir == f"csv-tiny-y/ood/{model}/{key}/{tail}"
