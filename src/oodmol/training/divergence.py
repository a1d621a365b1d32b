"""A training that diverges stops with a message saying so, instead of running to the end
on non-finite numbers and failing somewhere else."""

from __future__ import annotations

import math

import lightning as L
import torch

from oodmol.errors import RunFailure


class TrainingDiverged(RunFailure, RuntimeError):
    """The training loss or the validation loss stopped being a finite number."""


HINT = (
    "a lower learning rate, gradient clipping (model.module.gradient_clip_norm) or "
    "another seed usually helps"
)


class DivergenceGuard(L.Callback):
    """Raises `TrainingDiverged` at the first non-finite training loss (checked after
    every batch) or validation loss (after every validation, not the sanity check)."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if isinstance(loss, torch.Tensor) and not bool(torch.isfinite(loss).all()):
            raise TrainingDiverged(
                f"training diverged at epoch {trainer.current_epoch}, step "
                f"{trainer.global_step} (batch {batch_idx}): the training loss is "
                f"{loss.detach().float().mean().item()}; {HINT}"
            )

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        value = trainer.callback_metrics.get("val_loss")
        if value is not None and not math.isfinite(float(value)):
            raise TrainingDiverged(
                f"training diverged at epoch {trainer.current_epoch}: the validation loss "
                f"is {float(value)}; {HINT}"
            )
