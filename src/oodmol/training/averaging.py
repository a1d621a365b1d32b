"""Averages of the weights, as some models' recipes train (MACE: EMA 0.99 and SWA;
Graphormer-3D: EMA 0.9999): the averaged weights are the ones validated, selected,
tested and written as every checkpoint's `state_dict`; the trained weights travel beside
them (`current_model_state`), so a resumed run goes on exactly.

Built on Lightning's `WeightAveraging`. A model asks for one in its YAML:

    callbacks:
      ema: {_target_: oodmol.training.averaging.EMA, decay: 0.99}
"""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import EMAWeightAveraging, WeightAveraging


class _FittingOnly:
    """Lightning restores the trained weights over the averaged ones whenever a
    checkpoint is loaded while its average model exists, testing included, which would
    test the trained weights. Only a resumed fit needs them back."""

    def on_load_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if trainer.state.fn == "fit":
            super().on_load_checkpoint(trainer, pl_module, checkpoint)


class EMA(_FittingOnly, EMAWeightAveraging):
    """Exponential moving average of the weights after every optimizer step (from
    `start_step` on): avg ← decay · avg + (1 − decay) · weights."""

    def __init__(self, decay: float = 0.999, start_step: int | None = None) -> None:
        super().__init__(decay=decay, update_starting_at_step=start_step)


class SWA(_FittingOnly, WeightAveraging):
    """Stochastic weight averaging (Izmailov et al. 2018): the equal average of the
    weights at the end of every epoch from `start_epoch` on."""

    def __init__(self, start_epoch: int = 0) -> None:
        super().__init__()
        self.start_epoch = start_epoch

    def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        return epoch_idx is not None and epoch_idx >= self.start_epoch
