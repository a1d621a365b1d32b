"""What every model of the benchmark shares: target scaling and the evaluation steps."""

from __future__ import annotations

import lightning as L
import torch


class Regressor(L.LightningModule):
    """A model that predicts one property, in its own units, for a batch of molecules.

    Targets are standardised with the training set's mean and standard deviation; they
    are buffers, so they travel in the checkpoint and a loaded model predicts in the
    property's units without seeing the training data again.
    """

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("y_mean", torch.zeros(()))
        self.register_buffer("y_std", torch.ones(()))

    def setup(self, stage: str) -> None:
        if stage == "fit":  # a loaded checkpoint keeps the statistics it was trained with
            y = torch.as_tensor(self.trainer.datamodule.train_targets, dtype=torch.float64)
            self.y_mean.fill_(float(y.mean()))
            self.y_std.fill_(float(y.std()) if len(y) > 1 and float(y.std()) > 0 else 1.0)

    def predict_batch(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Mean prediction and, where the model has one, its standard deviation."""
        raise NotImplementedError

    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        mean, _ = self.predict_batch(batch)
        y = batch["y"].to(mean.dtype)
        scaled_mse = torch.mean(((mean - y) / self.y_std) ** 2)
        size = len(y)
        self.log("val_loss", scaled_mse, batch_size=size, prog_bar=True, sync_dist=True)
        self.log(
            "val_rmse", torch.sqrt(torch.mean((mean - y) ** 2)), batch_size=size, sync_dist=True
        )

    def test_step(self, batch: dict, batch_idx: int, dataloader_idx: int = 0) -> dict:
        mean, std = self.predict_batch(batch)
        return {
            "pred": mean.detach(),
            "std": None if std is None else std.detach(),
            "index": batch["index"],
        }
