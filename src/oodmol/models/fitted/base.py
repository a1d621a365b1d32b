"""Models fitted once on the whole training set (a random forest, kernel regression)
behind the same Lightning contract as the neural ones."""

from __future__ import annotations

from abc import abstractmethod

import numpy as np
import torch

from oodmol.data.batches import VectorBatch
from oodmol.errors import InputError
from oodmol.models.base import Regressor


class FittedOnceModule(Regressor):
    """Fitted at the start of fitting (before Lightning's validation sanity check, which
    already asks for predictions) on every training molecule, by `fit_training_set`;
    the Lightning loop around it then only validates, tests, checkpoints and logs like
    any other model's. A run resumed from a checkpoint that holds the fit is not fitted
    again."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    @abstractmethod
    def is_fitted(self) -> bool:
        """Whether the model holds a fit (made here, or loaded from a checkpoint)."""

    @abstractmethod
    def fit_training_set(
        self, x: np.ndarray, y: np.ndarray, weights: np.ndarray | None = None
    ) -> object:
        """Fit on the training set's features and targets (the property's units), each
        molecule weighted by `weights` where given (`oodmol.data.weighting`)."""

    def on_fit_start(self) -> None:
        if self.is_fitted():
            return
        datamodule = self.trainer.datamodule
        train = datamodule.datasets["train"]
        self.fit_training_set(train.x.numpy(), train.y.numpy(), datamodule.train_weights)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        """The fit a checkpoint holds (`load_fit`). A checkpoint is a file a user hands
        over: an entry that is not what train.py wrote is refused in one line."""
        try:
            self.load_fit(checkpoint, self.checkpoint_name())
        except ValueError as error:
            raise InputError(str(error)) from None

    def load_fit(self, checkpoint: dict, where: str) -> None:
        """Read the fit from the checkpoint `where`, raising ValueError for an entry that is
        not what train.py wrote; a model whose fit is in its state dict reads nothing."""

    def training_step(self, batch: VectorBatch, batch_idx: int) -> None:
        """One step of a zero-rate optimiser per epoch makes Lightning count the epoch as
        training progress, so checkpoints (best.ckpt) and logs are written as for every
        other model."""
        if batch_idx == 0:
            self.optimizers().step()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        # A parameter outside the module: it is neither counted nor checkpointed.
        return torch.optim.SGD([torch.nn.Parameter(torch.zeros(()))], lr=0.0)

    def checkpoint_name(self) -> str:
        """The checkpoint being loaded, as an error message names it."""
        trainer = self._trainer
        path = trainer.ckpt_path if trainer is not None else None
        return str(path) if path else "the checkpoint"
