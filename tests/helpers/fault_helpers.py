"""Callbacks that play a cluster's part in the run-lifecycle tests: a scheduler's stop
signal at a chosen training step, and a handler that an outside tool (submitit) installed
before training. Runs of train.py load them with `+callbacks.<name>._target_=...` and
this folder on PYTHONPATH."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import lightning as L


class SignalAtStep(L.Callback):
    """Sends `signal` to this process after the training batch that reaches `step`,
    unless FAULT_HELPERS_OFF is set: a resumed attempt keeps the callback (it is part of
    the run's configuration) but must not be stopped again."""

    def __init__(self, step: int, signal: str = "SIGTERM") -> None:
        self.step = step
        self.signal = __import__("signal").Signals[signal]

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step and not os.environ.get("FAULT_HELPERS_OFF"):
            os.kill(os.getpid(), self.signal)


class ForeignHandler(L.Callback):
    """Installs, before training starts, a handler for `signal` as submitit does for its
    requeue signal; when called it records whether the run's last.ckpt was on disk."""

    def __init__(self, signal: str, record: str, checkpoint: str) -> None:
        self.signal = __import__("signal").Signals[signal]
        self.record = Path(record)
        self.checkpoint = Path(checkpoint)

    def on_fit_start(self, trainer, pl_module) -> None:
        def handler(signum, frame) -> None:
            seen = {"signal": signum, "checkpoint_on_disk": self.checkpoint.is_file()}
            self.record.write_text(json.dumps(seen))

        signal.signal(self.signal, handler)


class PauseAtStep(L.Callback):
    """Stands still after the training batch that reaches `step`, as a long training
    would be there, until a stop signal arrives (at most `timeout` seconds), so that a
    test can signal a running SLURM job at a known step. Before waiting it writes
    `marker` (JSON: the SLURM job id to signal). A job that SLURM requeued
    (SLURM_RESTART_COUNT > 0) does not pause again."""

    def __init__(self, step: int, marker: str, timeout: float = 120.0) -> None:
        self.step = step
        self.marker = Path(marker)
        self.timeout = timeout

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step != self.step or int(os.environ.get("SLURM_RESTART_COUNT") or 0):
            return
        env = os.environ
        array = env.get("SLURM_ARRAY_JOB_ID")
        job = f"{array}_{env['SLURM_ARRAY_TASK_ID']}" if array else env["SLURM_JOB_ID"]
        self.marker.write_text(json.dumps({"job": job, "step": self.step}))
        deadline = time.monotonic() + self.timeout
        while not trainer.received_sigterm and time.monotonic() < deadline:
            time.sleep(0.1)  # the signal handler runs between these sleeps


class FillDiskAtEpoch(L.Callback):
    """Fills the file system that holds `ballast` once the validation of `epoch` ends,
    leaving `leave` bytes free: a full disk that the run meets when it writes that
    epoch's checkpoints (Lightning calls the checkpoint callbacks after every other one).
    The ballast is allocated (`posix_fallocate`), not a sparse file that takes no room.
    Rank 0 alone fills it (the one that writes checkpoints), and not where
    FAULT_HELPERS_OFF is set: the attempt that resumes once space is freed."""

    def __init__(self, epoch: int, ballast: str, leave: int) -> None:
        self.epoch = epoch
        self.ballast = Path(ballast)
        self.leave = leave

    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.sanity_checking or trainer.current_epoch != self.epoch:
            return
        if os.environ.get("FAULT_HELPERS_OFF") or not trainer.is_global_zero:
            return
        disk = os.statvfs(self.ballast.parent)
        size = disk.f_bavail * disk.f_frsize - self.leave
        fd = os.open(self.ballast, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.posix_fallocate(fd, 0, size)
        finally:
            os.close(fd)


class WaitForFile(L.Callback):
    """Stands still when training starts (or, with `epoch`, when that epoch starts: the
    earlier epochs' checkpoints are saved) until `path` exists or a stop signal arrives
    (at most `timeout` seconds), as a long training would still be running, so that a
    test can start a second run on the same folder meanwhile, or stop the run there."""

    def __init__(self, path: str, timeout: float = 120.0, epoch: int | None = None) -> None:
        self.path = Path(path)
        self.timeout = timeout
        self.epoch = epoch

    def on_train_start(self, trainer, pl_module) -> None:
        if self.epoch is None:
            self._wait(trainer)

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        if trainer.current_epoch == self.epoch:
            self._wait(trainer)

    def _wait(self, trainer) -> None:
        deadline = time.monotonic() + self.timeout
        while not (self.path.exists() or trainer.received_sigterm) and time.monotonic() < deadline:
            time.sleep(0.1)  # the signal handler runs between these sleeps
