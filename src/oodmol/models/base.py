"""What every model of the benchmark shares: target scaling and the evaluation steps."""

from __future__ import annotations

from dataclasses import dataclass

import lightning as L
import torch

from oodmol.data.batches import Batch


@dataclass
class Prediction:
    """A batch of predictive distributions in the property's units: the mean and, where
    the model has them, the epistemic (model) and aleatoric (noise) variances."""

    mean: torch.Tensor
    var_epistemic: torch.Tensor | None = None
    var_aleatoric: torch.Tensor | None = None
    # per-molecule marks a model raises about its own predictions (the Regression
    # Transformer's malformed decodes): columns of predictions.csv, counted per set
    flags: dict[str, torch.Tensor] | None = None


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
            self.fit_target_scaling(self.trainer.datamodule.train_targets)

    def fit_target_scaling(self, train_targets) -> None:
        """Mean and standard deviation of the training targets (1 where it is undefined)."""
        y = torch.as_tensor(train_targets, dtype=torch.float64)
        self.y_mean.fill_(float(y.mean()))
        self.y_std.fill_(float(y.std()) if len(y) > 1 and float(y.std()) > 0 else 1.0)

    def predict_batch(self, batch: Batch) -> Prediction:
        """The model's prediction as used in validation (deterministic)."""
        raise NotImplementedError

    def predict_test(self, batch: Batch) -> Prediction:
        """The prediction scored at test time; a model that samples (MC dropout) overrides
        it, so that validation and checkpoint selection stay deterministic."""
        return self.predict_batch(batch)

    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def fit_facts(self) -> dict:
        """Sections a model adds to its run's metrics.json (a closed-form model's
        hyperparameter search: `fit`); none by default."""
        return {}

    def validation_step(self, batch: Batch, batch_idx: int, dataloader_idx: int = 0) -> None:
        """The loss (scaled MSE) and RMSE of one validation set, under each name the
        datamodule gives it (`val_*` for the set that selects; see `validation_logs`)."""
        mean = self.predict_batch(batch).mean
        y = batch.y.to(mean.dtype)
        values = {
            "loss": torch.mean(((mean - y) / self.y_std) ** 2),
            "rmse": torch.sqrt(torch.mean((mean - y) ** 2)),
        }
        for prefix in self.trainer.datamodule.validation_logs()[dataloader_idx]:
            for metric, value in values.items():
                self.log(
                    f"{prefix}_{metric}",
                    value,
                    batch_size=len(y),
                    prog_bar=prefix == "val" and metric == "loss",
                    sync_dist=True,
                    add_dataloader_idx=False,
                )

    def test_step(self, batch: Batch, batch_idx: int, dataloader_idx: int = 0) -> dict:
        prediction = self.predict_test(batch)
        return {
            "index": batch.index,
            "pred": prediction.mean.detach(),
            "var_epistemic": _detached(prediction.var_epistemic),
            "var_aleatoric": _detached(prediction.var_aleatoric),
            "flags": prediction.flags,
        }

    def predict_step(self, batch: Batch, batch_idx: int, dataloader_idx: int = 0) -> dict:
        """As at test time: new molecules are predicted as test molecules were."""
        return self.test_step(batch, batch_idx, dataloader_idx)


def _detached(value: torch.Tensor | None) -> torch.Tensor | None:
    return None if value is None else value.detach()
