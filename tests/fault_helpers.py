"""Callbacks that play a cluster's part in the run-lifecycle tests: a scheduler's stop
signal at a chosen training step, and a handler that an outside tool (submitit) installed
before training. Runs of train.py load them with `+callbacks.<name>._target_=...` and
this folder on PYTHONPATH."""

from __future__ import annotations

import json
import os
import signal
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
