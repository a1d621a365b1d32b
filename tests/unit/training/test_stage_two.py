"""MACE's stage two: the plateau scheduler hands over to a constant learning rate at the
stage's epoch, also when a run is resumed inside the stage."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from oodmol.training.stage_two import StageTwo


class Tiny(L.LightningModule):
    """A linear fit under Adam and ReduceLROnPlateau (patience 0, factor 0.5), recording the
    learning rate of every epoch."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)
        self.lrs: list[float] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss)
        return loss

    def on_train_epoch_start(self) -> None:
        self.lrs.append(self.trainer.optimizers[0].param_groups[0]["lr"])

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=1e-2)
        # a constant monitored value: the plateau scheduler halves the rate every epoch after
        # the first
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=0)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": plateau, "monitor": "constant", "interval": "epoch"},
        }

    def on_train_epoch_end(self) -> None:
        self.log("constant", 1.0)


def _fit(root: Path, epochs: int, callbacks: list, ckpt: Path | None = None) -> Tiny:
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(16, 2), torch.randn(16, 1))
    model = Tiny()
    trainer = L.Trainer(
        max_epochs=epochs,
        callbacks=callbacks,
        default_root_dir=root,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, DataLoader(data, batch_size=8), ckpt_path=ckpt)
    trainer.save_checkpoint(root / "last.ckpt")
    return model


def test_the_rate_halves_until_the_stage_then_stays_at_its_lr(tmp_path: Path) -> None:
    model = _fit(tmp_path, 6, [StageTwo(start_epoch=3, lr=1e-4)])
    assert model.lrs[:3] == pytest.approx([1e-2, 1e-2, 5e-3])
    assert model.lrs[3:] == pytest.approx([1e-4] * 3)  # annealed within one epoch


def test_a_run_resumed_inside_the_stage_keeps_its_rate(tmp_path: Path) -> None:
    _fit(tmp_path, 4, [StageTwo(start_epoch=2, lr=1e-4)])
    resumed = _fit(tmp_path, 6, [StageTwo(start_epoch=2, lr=1e-4)], tmp_path / "last.ckpt")
    assert resumed.lrs == pytest.approx([1e-4, 1e-4])


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="start_epoch"):
        StageTwo(start_epoch=-1, lr=1e-4)
    with pytest.raises(ValueError, match="lr > 0"):
        StageTwo(start_epoch=1, lr=0.0)
