"""End to end, the faults of a shared cluster disk: a run that meets a full disk ends
with one line and a resumable failure, its last good checkpoint whole, and goes on once
space is freed to the very predictions of an uninterrupted run; two runs started on one
folder at once are one run and one refusal. Under DDP too, the full disk ends the run
with one line (rank 1, left waiting for rank 0, is ended with it).

The full disk is a small tmpfs mounted in a private mount namespace, which needs no root
(`unshare --map-root-user --mount`); where the system does not allow that, the test is
skipped, saying why. Every run is a 16-unit MLP with dropout on the tiny CSV task, three
epochs of six batches.
"""

from __future__ import annotations

import json
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
from e2e_helpers import MORGAN, QUIET, REPO, Result, TinyTask
from paths import HELPERS_PYTHONPATH

pytestmark = pytest.mark.slow

EPOCHS = 3
FULL_AT = 1  # the epoch whose checkpoints meet the full disk
MODEL = [
    "model=mlp",
    "model.module.backbone.hidden=[16]",
    "model.module.backbone.dropout=0.3",
    "model.batch_size=16",
    f"model.max_epochs={EPOCHS}",
    *MORGAN,
]
HELPERS = {"PYTHONPATH": HELPERS_PYTHONPATH}
TMPFS_SIZE = "4m"  # room for the runs; the ballast then takes all but `leave` bytes
ROOM = 32 * 1024  # less than a checkpoint (~85 kB), more than metrics.json needs
DDP = ["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2"]
# scenario: (bytes the ballast leaves free, further overrides)
SCENARIOS = {
    "room_for_metrics": (ROOM, []),
    "no_room_at_all": (0, []),
    "ddp": (ROOM, DDP),  # rank 1 waits at the checkpoint's barrier for rank 0
}


def private_tmpfs_problem(mount_point: Path) -> str | None:
    """Why a tmpfs cannot be mounted in a private mount namespace here, or None."""
    if shutil.which("unshare") is None:
        return "no `unshare` command (util-linux)"
    probe = subprocess.run(
        ["unshare", "--map-root-user", "--mount", "sh", "-c",
         f"mount -t tmpfs -o size=64k tmpfs {shlex.quote(str(mount_point))}"],
        capture_output=True, text=True,
    )  # fmt: skip
    if probe.returncode != 0:
        return f"cannot mount a tmpfs in a private mount namespace: {probe.stderr.strip()}"
    return None


@pytest.fixture(scope="module")
def faults(tmp_path_factory: pytest.TempPathFactory):
    task = TinyTask.create(tmp_path_factory.mktemp("faults"))
    root = task.root

    def train(folder: Path, *args: str) -> list[str]:
        return ["train.py", *task.task_args(), *QUIET, *MODEL, *args, f"hydra.run.dir={folder}"]

    task.submit("reference", train(root / "reference"))
    small_disk = root / "small_disk"
    small_disk.mkdir()
    problem = private_tmpfs_problem(small_disk)
    task.notes["tmpfs_problem"] = problem
    if problem is None:
        task.submit("full_disk", lambda: full_disk_script(task, train, small_disk))
    task.submit("together", lambda: two_runs_on_one_folder(task, train(root / "together")))
    yield task
    task.close()


def full_disk_script(task: TinyTask, train, mount_point: Path) -> Result:
    """In one private mount namespace (the tmpfs ends with it): for each of `SCENARIOS`, a
    run that meets the full disk at epoch FULL_AT, its folder copied out for the checks; then,
    with the ballast removed, the first folder run again without resume=true (refused)
    and with it (completed), and copied out again. The runs are forked from oodmol's
    training fork server inside the namespace (`namespace_runs`); outputs land in
    <root>/<step>.log and <step>.rc."""
    root = task.root
    steps: list[dict] = []

    def step(name: str, command: list[str], env: dict[str, str] | None = None) -> None:
        argv = command[1:]  # train.py's arguments
        log, rc = str(root / f"{name}.log"), str(root / f"{name}.rc")
        steps.append({"kind": "run", "argv": argv, "env": env or {}, "log": log, "rc": rc})

    def keep(folder: Path, name: str) -> None:
        steps.append({"kind": "copy", "from": str(folder), "to": str(root / name)})

    for scenario, (leave, overrides) in SCENARIOS.items():
        folder, ballast = mount_point / scenario, mount_point / f"{scenario}.ballast"
        fill = [
            "+callbacks.fill._target_=fault_helpers.FillDiskAtEpoch",
            f"+callbacks.fill.epoch={FULL_AT}",
            f"+callbacks.fill.ballast={ballast}",
            f"+callbacks.fill.leave={leave}",
        ]
        task.notes[scenario] = train(folder, *overrides, *fill)
        step(f"{scenario}_failed", task.notes[scenario])
        keep(folder, f"{scenario}_failed")
        steps.append({"kind": "remove", "path": str(ballast)})
    first = task.notes["room_for_metrics"]
    step("refused", first, env={"FAULT_HELPERS_OFF": "1"})
    step("resumed", [*first, "resume=true"], env={"FAULT_HELPERS_OFF": "1"})
    keep(mount_point / "room_for_metrics", "resumed")
    plan = root / "full_disk_plan.json"
    plan.write_text(json.dumps(steps))
    mount = f"mount -t tmpfs -o size={TMPFS_SIZE} tmpfs {shlex.quote(str(mount_point))}"
    runs = shlex.join([sys.executable, "-m", "namespace_runs", str(plan)])
    namespace = ["unshare", "--map-root-user", "--mount", "sh", "-c", f"{mount} && {runs}"]
    started = time.monotonic()
    proc = subprocess.run(
        namespace, cwd=REPO, env={**task.env, **HELPERS}, capture_output=True, text=True
    )
    seconds = time.monotonic() - started
    return Result(namespace, proc.returncode, proc.stdout, proc.stderr, seconds, started)


def step_result(task: TinyTask, name: str) -> Result:
    """A run of the full-disk script: its exit status and its terminal output."""
    rc = task.root / f"{name}.rc"
    assert rc.is_file(), f"{name} did not run:\n{task.result('full_disk').output()}"
    output = (task.root / f"{name}.log").read_text()
    return Result([name], int(rc.read_text()), output, output)


def two_runs_on_one_folder(task: TinyTask, command: list[str]) -> list[tuple[int, Result]]:
    """Two identical runs started together on one folder. Whichever takes the folder
    waits at the start of training until the other one has ended (or 120 s passed), so
    the other always meets a run in progress, never a finished one. Returns each run's
    pid and result."""
    go = task.root / "together.go"
    wait = ["+callbacks.wait._target_=fault_helpers.WaitForFile", f"+callbacks.wait.path={go}"]
    env = {**task.env, **HELPERS}
    args = [sys.executable, *command, *wait]
    runs = [
        subprocess.Popen(
            args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    deadline = time.monotonic() + 120
    while all(run.poll() is None for run in runs) and time.monotonic() < deadline:
        time.sleep(0.2)
    go.touch()
    results = []
    for run in runs:
        stdout, stderr = run.communicate(timeout=480)
        results.append((run.pid, Result(args, run.returncode, stdout, stderr)))
    return results


def metrics_of(folder: Path) -> dict:
    return json.loads((folder / "metrics.json").read_text())


def temporary_files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.suffix == ".tmp")


@pytest.fixture
def full_disk(faults: TinyTask) -> TinyTask:
    if faults.notes["tmpfs_problem"]:
        pytest.skip(faults.notes["tmpfs_problem"])
    script = faults.result("full_disk")
    assert script.returncode == 0, script.output()
    return faults


# ------------------------------------------------------------------------ full disk


@pytest.mark.parametrize("scenario", ["room_for_metrics", "ddp"])
def test_full_disk_ends_the_run_with_one_line_and_a_resumable_failure(
    full_disk: TinyTask, scenario: str
) -> None:
    failed = step_result(full_disk, f"{scenario}_failed")
    assert failed.returncode == 1, failed.output()
    assert "Traceback" not in failed.stdout
    last_line = failed.stdout.strip().splitlines()[-1]
    folder = full_disk.notes[scenario][-1].removeprefix("hydra.run.dir=")
    assert last_line.startswith("[oodmol train] run failed: no space left on device (ENOSPC)")
    assert f"{folder}/checkpoints/last.ckpt (epoch {FULL_AT - 1}, step " in last_line
    assert f"hydra.run.dir={folder} resume=true" in last_line
    metrics = metrics_of(full_disk.root / f"{scenario}_failed")
    assert metrics["status"] == "failed"
    failure = metrics["failure"]
    assert failure["kind"] == "disk_full" and failure["resumable"] is True
    assert failure["errno"] == "ENOSPC"
    assert failure["path"].startswith(f"{folder}/checkpoints/")
    assert failure["message"] in last_line


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_full_disk_keeps_the_last_good_checkpoint_and_no_temporary_file(
    full_disk: TinyTask, scenario: str
) -> None:
    folder = full_disk.root / f"{scenario}_failed"
    last = torch.load(folder / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert last["epoch"] == FULL_AT - 1
    torch.load(folder / "checkpoints" / "best.ckpt", map_location="cpu", weights_only=True)
    assert temporary_files(folder) == []


def test_no_room_even_for_metrics_still_says_what_happened(full_disk: TinyTask) -> None:
    failed = step_result(full_disk, "no_room_at_all_failed")
    assert failed.returncode == 1, failed.output()
    assert "Traceback" not in failed.stdout
    last_line = failed.stdout.strip().splitlines()[-1]
    assert last_line.startswith("[oodmol train] run failed: no space left on device (ENOSPC)")
    assert f"last.ckpt (epoch {FULL_AT - 1}, step 6) is intact" in last_line
    assert "metrics.json could not record the failure: the disk is full" in last_line
    # the folder is then an interrupted run, which resume=true continues as well
    assert not (full_disk.root / "no_room_at_all_failed" / "metrics.json").exists()


def test_freed_disk_resumes_to_the_predictions_of_an_uninterrupted_run(
    full_disk: TinyTask,
) -> None:
    refused = step_result(full_disk, "refused")
    assert refused.returncode == 2, refused.output()
    assert "failed but can go on (no space left on device" in refused.stdout
    assert "continue it with resume=true" in refused.stdout
    step_result(full_disk, "resumed").ok()
    resumed, reference = full_disk.root / "resumed", full_disk.root / "reference"
    full_disk.result("reference").ok()
    for name in ("predictions.csv", "csv/metrics.csv"):
        assert (resumed / name).read_bytes() == (reference / name).read_bytes(), name
    metrics = metrics_of(resumed)
    assert metrics["status"] == "complete" and "failure" not in metrics
    assert metrics["ood"] == metrics_of(reference)["ood"]
    resumes = metrics["training"]["resumes"]
    assert [r["epoch"] for r in resumes] == [0, FULL_AT]  # from the last good checkpoint


# --------------------------------------------------------- one folder, one process


def test_second_run_on_a_busy_folder_is_refused_at_once(faults: TinyTask) -> None:
    (first_pid, first), (second_pid, second) = faults.result("together")
    runs = {first.returncode: (first_pid, first), second.returncode: (second_pid, second)}
    assert sorted(runs) == [0, 2], f"{first.output()}\n{second.output()}"
    winner_pid, winner = runs[0]
    _, loser = runs[2]
    winner.ok()
    folder = faults.root / "together"
    assert loser.stderr.strip().splitlines() == [
        f"[oodmol train] {folder} is in use by another run, training into it now (pid "
        f"{winner_pid} on {socket.gethostname()}): refusing to run into it at the same time. "
        "Wait for that run to end, or choose another hydra.run.dir."
    ], loser.output()
    assert loser.stdout == ""
    # the folder holds the one run: one attempt, each epoch logged once, one test
    metrics = metrics_of(folder)
    assert metrics["status"] == "complete" and metrics["training"]["attempts"] == 1
    log = pd.read_csv(folder / "csv" / "metrics.csv").dropna(subset=["val_loss"])
    assert log["epoch"].tolist() == list(range(EPOCHS))
    assert (folder / "train.log").read_text().count("test metrics:") == 1
