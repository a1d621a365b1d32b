"""PropertyRegressor: backbone → readout → head, trained on standardised targets."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from oodmol.models.base import Regressor
from oodmol.models.heads import RegressionHead
from oodmol.models.readout import Readout


class PropertyRegressor(Regressor):
    """The generic neural model: any backbone, shared readout and head.

    A backbone returns either one vector per molecule, or per-atom vectors with the
    molecule index of each atom (`(h, segment)`), which the readout pools. Optimiser and
    scheduler come from the config as partials (`_partial_: true`).
    """

    def __init__(
        self,
        backbone: nn.Module,
        optimizer: Callable[..., torch.optim.Optimizer],
        extensive: bool = False,
        head_hidden: list[int] | None = None,
        head_dropout: float = 0.0,
        scheduler: Callable | None = None,
        scheduler_interval: str = "epoch",
    ) -> None:
        super().__init__()
        self.backbone = backbone
        self.readout = Readout(extensive)
        self.head = RegressionHead(backbone.out_dim, head_hidden, head_dropout)
        self.optimizer_factory = optimizer
        self.scheduler_factory = scheduler
        self.scheduler_interval = scheduler_interval

    def forward(self, batch: dict) -> torch.Tensor:
        """Standardised prediction."""
        out = self.backbone(batch)
        if isinstance(out, tuple):
            h, segment = out
            out = self.readout(h, segment, len(batch["y"]))
        return self.head(out)

    def predict_batch(self, batch: dict) -> tuple[torch.Tensor, None]:
        return self(batch) * self.y_std + self.y_mean, None

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        target = (batch["y"] - self.y_mean) / self.y_std
        loss = nn.functional.mse_loss(self(batch), target)
        self.log("train_loss", loss, batch_size=len(target), prog_bar=True)
        return loss

    def configure_optimizers(self):
        optimizer = self.optimizer_factory(self.parameters())
        if self.scheduler_factory is None:
            return optimizer
        scheduler = self.scheduler_factory(optimizer)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {
                "scheduler": scheduler,
                "interval": self.scheduler_interval,
                "monitor": "val_loss",
            },
        }
