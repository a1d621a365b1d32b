"""MACE's stage two (mace-torch's `--stage_two`, formerly `--swa`): from `start_epoch` on,
the learning rate is `lr` (torch's `SWALR` with one linear annealing epoch, as mace builds
and steps it, reaches it at the stage's first epoch) and the plateau scheduler stops
deciding. mace also keeps an
`AveragedModel` in that stage but never evaluates or saves it, and switches to other loss
weights, which for an energy-only loss only rescale it (Adam does not see the scale):
the learning rate is the whole of the stage's effect on training.

A model asks for it in its YAML:

    callbacks:
      stage_two: {_target_: oodmol.training.stage_two.StageTwo, start_epoch: 400, lr: 1.0e-4}
"""

from __future__ import annotations

import warnings

import lightning as L
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.types import LRSchedulerConfig
from torch.optim.swa_utils import SWALR


class StageTwo(Callback):
    """Replace every scheduler by `SWALR(lr, anneal_epochs=1, linear)`, stepped once at
    once (as mace steps it at the top of the stage's first epoch) and then per epoch, when
    the epoch reaches `start_epoch` (also on a run resumed in that stage)."""

    def __init__(self, start_epoch: int, lr: float) -> None:
        if start_epoch < 0 or lr <= 0:
            raise ValueError(f"StageTwo needs start_epoch >= 0 and lr > 0, got {start_epoch}, {lr}")
        self.start_epoch = start_epoch
        self.lr = lr
        self._installed = False

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._installed or trainer.current_epoch < self.start_epoch:
            return
        schedulers = [
            SWALR(optimizer, swa_lr=self.lr, anneal_epochs=1, anneal_strategy="linear")
            for optimizer in trainer.optimizers
        ]
        with warnings.catch_warnings():
            # torch counts optimizer steps from the scheduler's creation: none yet here
            warnings.filterwarnings("ignore", "Detected call of `lr_scheduler.step", UserWarning)
            for scheduler in schedulers:
                scheduler.step()
        # the strategy's own list, replaced in place (the trainer's property has no setter)
        trainer.lr_scheduler_configs[:] = [
            LRSchedulerConfig(scheduler, interval="epoch") for scheduler in schedulers
        ]
        self._installed = True
