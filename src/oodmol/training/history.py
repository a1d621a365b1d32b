"""What happened during a run's training, kept across interruptions: the time of every
attempt, the checkpoints it resumed from, and every epoch's validation metrics."""

from __future__ import annotations

import math
import time

import lightning as L

from oodmol.training.device import peak_memory_mb


class TrainingRecord(L.Callback):
    """Travels in every checkpoint (`state_dict`), so a resumed run reports its whole
    history: `train_seconds` sums every attempt, `attempts` names where each one started.

    `validation` holds one entry per finished validation (epoch, step and the logged
    `val_*` metrics); the sanity check is not one.
    """

    def __init__(self) -> None:
        self.attempts: list[dict] = []
        self.validation: list[dict] = []
        self._started: float | None = None
        self._previous_seconds = 0.0

    def state_dict(self) -> dict:
        return {"attempts": self._attempts_so_far(), "validation": list(self.validation)}

    def load_state_dict(self, state_dict: dict) -> None:
        self.attempts = list(state_dict.get("attempts", []))
        self.validation = list(state_dict.get("validation", []))

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._started = time.perf_counter()
        self._previous_seconds = sum(a["seconds"] for a in self.attempts)
        resumed_from = None if trainer.ckpt_path is None else str(trainer.ckpt_path)
        self.attempts.append({"resumed_from": resumed_from, "seconds": 0.0})

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # the loops are restored by now: where this attempt starts
        self.attempts[-1].update(epoch=trainer.current_epoch, step=trainer.global_step)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or trainer.state.fn != "fit":
            return
        logged = {
            name: float(value)
            for name, value in trainer.callback_metrics.items()
            if name.startswith("val_")
        }
        self.validation.append(
            {"epoch": trainer.current_epoch, "step": trainer.global_step, **logged}
        )

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.attempts = self._attempts_so_far()
        self.attempts[-1]["peak_memory_mb"] = round(peak_memory_mb(trainer.strategy.root_device), 1)
        self._started = None

    def _attempts_so_far(self) -> list[dict]:
        attempts = [dict(a) for a in self.attempts]
        if self._started is not None and attempts:
            attempts[-1]["seconds"] = time.perf_counter() - self._started
        return attempts

    @property
    def train_seconds(self) -> float:
        return sum(a["seconds"] for a in self._attempts_so_far())

    def best_epoch(self, monitor: str, mode: str) -> dict | None:
        """The validation entry a checkpoint monitoring `monitor` keeps: the first best
        (ModelCheckpoint replaces its best only on a strict improvement)."""
        best = None
        for entry in self.validation:
            value = entry.get(monitor)
            if value is None or math.isnan(value):
                continue
            if best is None or (value < best[monitor] if mode == "min" else value > best[monitor]):
                best = entry
        return best

    def summary(self) -> dict:
        """The `training` section of metrics.json."""
        attempts = self._attempts_so_far()
        return {
            "attempts": len(attempts),
            "resumed": len(attempts) > 1 or bool(attempts and attempts[0]["resumed_from"]),
            "resumes": [
                {k: a.get(k) for k in ("resumed_from", "epoch", "step", "seconds")}
                for a in attempts
            ],
            "validated_epochs": len(self.validation),
            "peak_memory_mb": max((a.get("peak_memory_mb") or 0 for a in attempts), default=None),
        }


def validation_summary(record: TrainingRecord, datamodule, selects: bool) -> dict:
    """The `validation` section of metrics.json: which set selected the tested epoch
    (`selected_on`; null where the last epoch is tested), and per validation set its
    best loss (the minimum over epochs, what a search selecting on it would read), that
    epoch, and its loss at the tested epoch. Recorded for every set, whichever selects, so
    that one search's trials can be compared under either rule afterwards."""
    sets = datamodule.validation_sets()
    logs = datamodule.validation_logs()
    tested = record.best_epoch("val_loss", "min") if selects else None
    if not selects and record.validation:
        tested = record.validation[-1]
    summary: dict = {"selected_on": None, "sets": {}}
    for name, prefixes in zip(sets, logs, strict=True):
        metric = f"{prefixes[0]}_loss"
        best = record.best_epoch(metric, "min")
        if "val" in prefixes and selects:
            summary["selected_on"] = name
        summary["sets"][name] = {
            "metric": metric,
            "best_loss": None if best is None else best[metric],
            "best_epoch": None if best is None else best["epoch"],
            "tested_loss": None if tested is None else tested.get(metric),
        }
    return summary
