"""Pre-emption as clusters do it: a stop signal saves `last.ckpt` at a batch boundary,
says how to resume, and ends the process with a non-zero status.

Lightning turns SIGTERM into `SIGTERMException` at the next batch boundary (told to every
DDP process) but then exits with status 0 and no checkpoint, which a scheduler records as
success. Here SLURM's warning signals (USR1, and USR2 which submitit uses) are treated as
SIGTERM is, the checkpoint is written where the training state is consistent, and the
exit status is 128 + the signal's number, as a shell reports a process killed by it.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import lightning as L
from lightning.pytorch.trainer.connectors.signal_connector import _HandlersCompose
from lightning.pytorch.utilities.exceptions import SIGTERMException
from lightning.pytorch.utilities.rank_zero import rank_zero_only

log = logging.getLogger(__name__)
DEFAULT_SIGNALS = ("SIGTERM", "SIGUSR1", "SIGUSR2")
Handler = Callable[[int, FrameType | None], object] | int | None


class PreemptionCheckpoint(L.Callback):
    """Saves `path` (the run's last.ckpt) when training is stopped by one of `signals`.

    The checkpoint is written in the middle of an epoch, after a finished batch, where a
    resumed run can go on with the very next batch (`MoleculeDataModule` saves the
    position, `RandomState` the generators). At an epoch's last batch Lightning first
    finishes the epoch, whose end writes last.ckpt anyway; a signal during validation
    keeps the last.ckpt of the previous epoch's end, and resuming repeats that epoch,
    exactly. A handler that was installed before (submitit's, which requeues the job)
    is called after the checkpoint is on disk.
    """

    def __init__(self, path: str | Path, signals: tuple[str, ...] = DEFAULT_SIGNALS) -> None:
        self.path = Path(path)
        self.signals = [signal.Signals[name] for name in signals]
        self.received: signal.Signals | None = None
        self.saved: dict | None = None
        self._previous: dict[signal.Signals, Handler] = {}
        self._lightning_sigterm: Handler = None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # Python delivers signals to the main thread only
        self._lightning_sigterm = signal.getsignal(signal.SIGTERM)
        for signum in self.signals:
            self._previous[signum] = signal.getsignal(signum)
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signal.Signals(signum)
            log.warning("received %s: stopping at the next batch boundary", self.received.name)
        if callable(self._lightning_sigterm):  # Lightning stops its loops (and DDP peers)
            self._lightning_sigterm(signum, frame)

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        if not isinstance(exception, SIGTERMException) or not _mid_epoch(trainer):
            return
        trainer.save_checkpoint(self.path)
        self.saved = {"epoch": trainer.current_epoch, "step": trainer.global_step}

    def stop(self, resume_hint: str) -> SystemExit:
        """After the trainer stopped on a signal: report, hand over to the handler that
        was there before ours (it may requeue and exit), and the exit to raise."""
        signum = self.received or signal.SIGTERM
        if self.saved:
            where = f"saved {self.path} at epoch {self.saved['epoch']}, step {self.saved['step']}"
        elif self.path.is_file():
            where = f"{self.path} holds the last finished epoch"
        else:
            where = "no epoch had finished, so nothing was saved (the run will start over)"
        message = (
            f"[oodmol] stopped by {signum.name}; {where}. Resume with:\n  {resume_hint}\n"
            "(a job requeued by SLURM resumes by itself)"
        )
        if trainer_is_rank_zero():
            print(message, flush=True)
        previous = self._previous.get(signum)
        if callable(previous) and not isinstance(previous, _HandlersCompose):
            previous(signum, None)
        elif signum != signal.SIGTERM and "SLURM_JOB_ID" in os.environ:
            _requeue_slurm_job()
        return SystemExit(128 + int(signum))


def _mid_epoch(trainer: L.Trainer) -> bool:
    """Between two training batches of one epoch: the only place a checkpoint is both
    consistent and resumable at the next batch."""
    if not trainer.training or trainer.sanity_checking:
        return False
    done = trainer.fit_loop.epoch_loop.batch_progress.current.completed
    return 0 < done < trainer.num_training_batches


def trainer_is_rank_zero() -> bool:
    return getattr(rank_zero_only, "rank", 0) == 0


def _requeue_slurm_job() -> None:
    """`scontrol requeue` for this job (an array task by its array id), as Lightning's
    SLURM environment does, but once the checkpoint is safely written."""
    array_job = os.environ.get("SLURM_ARRAY_JOB_ID")
    job = (
        f"{array_job}_{os.environ['SLURM_ARRAY_TASK_ID']}"
        if array_job
        else os.environ["SLURM_JOB_ID"]
    )
    if not trainer_is_rank_zero():
        return
    try:
        result = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True)
    except OSError as error:
        log.warning("could not requeue SLURM job %s: %s", job, error)
        return
    if result.returncode == 0:
        print(f"[oodmol] requeued SLURM job {job}", flush=True)
    else:
        log.warning("requeueing SLURM job %s failed: %s", job, result.stderr.strip())
