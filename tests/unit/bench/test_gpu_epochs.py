"""bench.gpu_epochs' clock: it times every training epoch of a real fit (validation
included) and writes what it measured."""

from __future__ import annotations

import json
import time
from pathlib import Path

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

from bench.gpu_epochs import EpochClock


class Tiny(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.mean((self.layer(x).squeeze(-1) - y) ** 2)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.mean((self.layer(x).squeeze(-1) - y) ** 2))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def clocked(module: L.LightningModule, n: int, folder: Path, **limits) -> dict:
    """What the clock wrote of a CPU fit of `module` on `n` random rows in batches of 8,
    for Lightning's `limits` (max_epochs, max_time)."""
    data = TensorDataset(torch.randn(n, 4), torch.randn(n))
    out = folder / "clock.json"
    trainer = L.Trainer(
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[EpochClock(str(out))],
        **limits,
    )
    trainer.fit(module, DataLoader(data, batch_size=8), DataLoader(data, batch_size=8))
    return json.loads(out.read_text())


def test_the_clock_times_each_epoch_with_its_validation(tmp_path: Path) -> None:
    figures = clocked(Tiny(), 32, tmp_path, max_epochs=3)
    assert len(figures["epochs_s"]) == 3 and all(s > 0 for s in figures["epochs_s"])
    assert figures["peak_mb"] > 0 and figures["device"].startswith("CPU")
    assert figures["cut_s"] == []


def test_an_epoch_cut_short_by_max_time_is_kept_apart(tmp_path: Path) -> None:
    class Slow(Tiny):
        def training_step(self, batch, batch_idx):
            time.sleep(0.3)
            return super().training_step(batch, batch_idx)

    # 2.4 s an epoch: the second is cut
    figures = clocked(Slow(), 64, tmp_path, max_epochs=5, max_time={"seconds": 4})
    assert len(figures["epochs_s"]) == 1 and figures["epochs_s"][0] > 2.4
    assert len(figures["cut_s"]) == 1 and figures["cut_s"][0] < 2.4
