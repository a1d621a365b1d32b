"""What keeps a run folder trustworthy without training anything: a failed write leaves
the previous file whole (checkpoints included, under every strategy a run builds, and
the CSV log a resumed run reads back), and metrics.json, which marks a run complete,
comes after the files it vouches for; a run that failed on a full disk may go on while
a diverged one may not; a folder held by a running process, and only then, refuses
another one.

The end-to-end versions (a real full disk, two real runs on one folder) are in
test_run_faults.py."""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning_utilities.core.rank_zero import rank_zero_only
from paths import REPO

from oodmol.config import compose_config
from oodmol.errors import UserError
from oodmol.identity import config_key
from oodmol.io import atomic_write_bytes, is_disk_full
from oodmol.locks import FolderInUse, FolderLock, holder_of
from oodmol.predictions import SetPredictions
from oodmol.run_record import RunRecord
from oodmol.scoring.results import write_results
from oodmol.training.checkpoint_io import AtomicCheckpointIO, run_plugins
from oodmol.training.loggers import CSVLogger
from oodmol.training.run import _hold, build_trainer
from oodmol.training.run_folder import LOCK_FILE, RunFolderError, last_checkpoint, plan_run
from oodmol.training.sweeps import job_outcomes
from oodmol.training.sweeps import summary as sweep_summary


def full_disk(*args: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def leftovers(folder: Path) -> list[str]:
    """Temporary files of a write (hidden siblings ending in .tmp)."""
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


# ------------------------------------------------------------- atomic checkpoint writes


@pytest.mark.parametrize("failing", ["write", "fsync"])
def test_failed_write_keeps_the_previous_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    target = tmp_path / "last.ckpt"
    atomic_write_bytes(target, b"good checkpoint")
    if failing == "fsync":
        monkeypatch.setattr(os, "fsync", full_disk)
    else:  # what a buffered file's write calls in the end
        monkeypatch.setattr(os, "fdopen", lambda fd, mode: _FullFile(fd))
    with pytest.raises(OSError) as raised:
        atomic_write_bytes(target, b"new checkpoint, never whole")
    assert is_disk_full(raised.value)
    assert raised.value.filename == str(target)  # the file meant, not the temporary one
    assert target.read_bytes() == b"good checkpoint"
    assert leftovers(tmp_path) == []


class _FullFile:
    """A file whose every write meets a full disk."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __enter__(self) -> _FullFile:
        return self

    def __exit__(self, *exc_info: object) -> None:
        os.close(self.fd)

    def write(self, data: object) -> None:
        full_disk()


def test_checkpoint_io_replaces_a_checkpoint_whole(tmp_path: Path) -> None:
    path = tmp_path / "checkpoints" / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"epoch": 0, "w": torch.zeros(3)}, path)
    io.save_checkpoint({"epoch": 1, "w": torch.ones(3)}, path)
    saved = torch.load(path, weights_only=True)
    assert saved["epoch"] == 1 and torch.equal(saved["w"], torch.ones(3))
    assert leftovers(path.parent) == []


def test_failed_checkpoint_write_keeps_the_last_good_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"epoch": 0}, path)
    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError) as raised:
        io.save_checkpoint({"epoch": 1}, path)
    assert raised.value.errno == errno.ENOSPC  # not a RuntimeError from torch.save
    assert torch.load(path, weights_only=True) == {"epoch": 0}
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize(
    "trainer", [["trainer=cpu"], ["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2"]]
)
def test_every_trainer_of_a_run_writes_checkpoints_atomically(
    tmp_path: Path, trainer: list[str]
) -> None:
    """The Trainer hands the plugin to the strategy it builds, DDP's included (saving
    and removing a checkpoint both go through `strategy.checkpoint_io`)."""
    cfg = compose_config("train", [*trainer, f"paths.output_dir={tmp_path}", "progress=false"])
    built = build_trainer(cfg, callbacks=[], loggers=[])
    assert type(built.strategy.checkpoint_io) is AtomicCheckpointIO


def test_configured_plugins_are_kept_and_a_second_checkpoint_writer_refused() -> None:
    from lightning.pytorch.plugins.environments import LightningEnvironment

    environment = LightningEnvironment()
    plugins = run_plugins([environment])
    assert plugins[0] is environment and isinstance(plugins[1], AtomicCheckpointIO)
    with pytest.raises(UserError, match=r"trainer\.plugins holds a CheckpointIO plugin"):
        run_plugins(TorchCheckpointIO())


def test_csv_log_with_a_new_column_is_replaced_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A save that adds a column rewrites the log atomically: a failed one leaves it
    as it was."""
    logger = CSVLogger(tmp_path, name="csv", version="")
    logger.resume_at(None)
    logger.log_metrics({"train_loss": 1.0}, step=0)
    logger.save()
    log_file = tmp_path / "csv" / "metrics.csv"
    before = log_file.read_bytes()
    logger.log_metrics({"train_loss": 0.5, "val_loss": 0.7}, step=1)  # a new column
    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError):
        logger.save()
    assert log_file.read_bytes() == before
    assert leftovers(log_file.parent) == []


def test_csv_log_appended_save_by_save_is_the_log_written_whole(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path, name="csv", version="")
    logger.resume_at(None)
    rows = [{"train_loss": 1.0 / (k + 1)} for k in range(5)]
    for step, row in enumerate(rows):
        logger.log_metrics(row, step=step)
        if step == 2:
            logger.log_metrics({"val_loss": 0.3}, step=step)  # a column appears
        logger.save()
    expected = ["step,train_loss,val_loss", "0,1.0,", "1,0.5,", "2,0.3333333333333333,"]
    expected += ["2,,0.3", "3,0.25,", "4,0.2,"]
    assert (tmp_path / "csv" / "metrics.csv").read_text().splitlines() == expected


def test_a_resumed_csv_log_drops_the_row_a_kill_cut(tmp_path: Path) -> None:
    """An append cut in the middle of a row (here `4,0.0625` cut to `4,0.`, which would
    read as a loss of 0) is read back up to its last complete line."""
    log_file = tmp_path / "csv" / "metrics.csv"
    log_file.parent.mkdir()
    log_file.write_text("step,train_loss\n0,1.0\n1,0.5\n2,0.25\n3,0.125\n4,0.")
    logger = CSVLogger(tmp_path, name="csv", version="")
    logger.resume_at(5)
    logger.log_metrics({"train_loss": 0.1}, step=5)
    logger.save()
    assert log_file.read_text().splitlines() == [
        "step,train_loss", "0,1.0", "1,0.5", "2,0.25", "3,0.125", "5,0.1",
    ]  # fmt: skip


def test_metrics_json_comes_after_the_files_it_vouches_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """metrics.json marks a run complete, never trained again: a run that fails while
    writing its predictions or figures must not have one."""

    def broken_figure(path: Path, *args: object, **kwargs: object) -> None:
        full_disk()

    monkeypatch.setattr("oodmol.scoring.results.parity_plot", broken_figure)
    sets = {
        name: SetPredictions(
            name, np.arange(3), np.array(["C", "CC", "CCC"]), np.zeros(3), np.ones(3)
        )
        for name in ("id", "ood")
    }
    with pytest.raises(OSError):
        write_results(tmp_path, sets, RunRecord("t", "ood", "m", 0), 0.0, "y", "")
    assert (tmp_path / "predictions.csv").is_file()
    assert not (tmp_path / "metrics.json").exists()


# ------------------------------------------------------- what a failed folder allows


@pytest.fixture
def run_config(tmp_path: Path):
    """A tiny CSV task's run config, writing into tmp_path/run."""
    csv = tmp_path / "tiny.csv"
    csv.write_text("smiles,y\nCCO,1.0\nCCN,2.0\n")
    folder = tmp_path / "run"
    folder.mkdir()

    def compose(*overrides: str):
        task = ["task=csv", f"task.path={csv}", "task.target_column=y", "model=mlp"]
        return compose_config("train", [*task, f"paths.output_dir={folder}", *overrides])

    return folder, compose


def write_failure(folder: Path, cfg, failure: dict) -> None:
    record = RunRecord(cfg.task.name, cfg.split.name, cfg.model.name, cfg.seed, "failed")
    record.config_key = config_key(cfg)
    record.with_sections(failure=failure).write(folder)


DISK_FULL = {
    "kind": "disk_full",
    "resumable": True,
    "errno": "ENOSPC",
    "message": "no space left on device (ENOSPC) writing checkpoints/last.ckpt",
}


def test_disk_full_failure_goes_on_only_when_asked(run_config) -> None:
    folder, compose = run_config
    write_failure(folder, compose(), DISK_FULL)
    with pytest.raises(RunFolderError) as refused:
        plan_run(folder, compose())
    message = str(refused.value)
    assert "failed but can go on (no space left on device" in message
    assert "continue it with resume=true" in message
    # nothing saved yet: it starts over; a saved last.ckpt is resumed (test_run_faults)
    assert plan_run(folder, compose("resume=true")).action == "train"


def test_diverged_failure_stays_refused_even_when_asked_to_resume(run_config) -> None:
    folder, compose = run_config
    diverged = {"kind": "TrainingDiverged", "message": "training diverged at epoch 0"}
    write_failure(folder, compose(), diverged)
    with pytest.raises(RunFolderError, match="holds a failed attempt of this run"):
        plan_run(folder, compose("resume=true"))


# ------------------------------------------------------------- one folder, one process

HOLDER = """
import sys, time
from pathlib import Path
from oodmol.locks import FolderLock
lock = FolderLock(Path(sys.argv[1]), sys.argv[2])
print("held", flush=True)
time.sleep(120)
"""


def hold_in_another_process(folder: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(folder), LOCK_FILE],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert holder.stdout.readline().strip() == "held"
    return holder


@pytest.mark.slow  # starts a Python process
def test_held_folder_refuses_another_process_naming_the_holder(tmp_path: Path) -> None:
    holder = hold_in_another_process(tmp_path)
    try:
        with pytest.raises(FolderInUse) as refused:
            FolderLock(tmp_path, LOCK_FILE)
        message = str(refused.value)
        assert message.startswith(
            f"{tmp_path} is in use by another run, training into it now (pid {holder.pid} on "
        )
        assert isinstance(refused.value, UserError)  # exit status 2
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow  # starts a Python process
def test_lock_of_a_killed_run_blocks_no_one(tmp_path: Path) -> None:
    holder = hold_in_another_process(tmp_path)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert (tmp_path / LOCK_FILE).is_file()  # left behind, yet not held
    with (
        FolderLock(tmp_path, LOCK_FILE),
        pytest.raises(FolderInUse, match=f"pid {os.getpid()} on "),
    ):
        FolderLock(tmp_path, LOCK_FILE)
    with FolderLock(tmp_path, LOCK_FILE):  # released at the end of the run
        pass


@pytest.mark.slow  # starts a Python process
def test_a_sweeps_summary_tells_a_running_job_from_a_stopped_one(tmp_path: Path) -> None:
    """A job's folder without metrics.json: training now while another process holds its
    lock, interrupted once that process is gone and a last.ckpt is left."""
    folder = tmp_path / "sweep" / "0"
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "overrides.yaml").write_text("- model=mlp\n")
    last_checkpoint(folder).parent.mkdir(parents=True)
    last_checkpoint(folder).write_bytes(b"")
    holder = hold_in_another_process(folder)
    try:
        (running,) = job_outcomes(tmp_path / "sweep")
        assert running.status == "running"
        assert running.reason.startswith(f"training now (pid {holder.pid} on ")
    finally:
        holder.kill()
        holder.wait()
    (stopped,) = job_outcomes(tmp_path / "sweep")
    assert stopped.status == "interrupted"
    assert "1 jobs, 1 interrupted" in sweep_summary(tmp_path / "sweep")


def test_a_run_waits_out_a_reader_asking_whether_the_folder_is_held(tmp_path: Path) -> None:
    """`holder_of` asks by taking a shared lock for an instant: a run starting then gets
    the folder once the reader lets go, instead of being refused."""
    (tmp_path / LOCK_FILE).touch()
    reader = os.open(tmp_path / LOCK_FILE, os.O_RDONLY)
    fcntl.flock(reader, fcntl.LOCK_SH)
    letting_go = threading.Timer(0.1, os.close, [reader])
    letting_go.start()
    try:
        with FolderLock(tmp_path, LOCK_FILE):
            assert holder_of(tmp_path, LOCK_FILE) == f"pid {os.getpid()} on {socket.gethostname()}"
    finally:
        letting_go.join()
    assert holder_of(tmp_path, LOCK_FILE) is None


def test_only_rank_zero_holds_the_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The other DDP ranks are rank 0's children, training into the same folder."""
    with FolderLock(tmp_path, LOCK_FILE):
        monkeypatch.setattr(rank_zero_only, "rank", 1)
        with _hold(tmp_path):
            pass
