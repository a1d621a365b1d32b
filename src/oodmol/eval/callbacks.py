"""Lightning callbacks: time the fit, and evaluate ID and OOD test sets at test end."""

from __future__ import annotations

import time
from pathlib import Path

import lightning as L
import numpy as np
import pandas as pd
import torch
from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger

from oodmol.data.datamodule import TEST_SETS
from oodmol.eval.results import SetPredictions, write_results


class TestEvaluation(L.Callback):
    """Collects test predictions of every process and writes the run's result files.

    Under DDP each process sees part of each test set (padded to equal length), so the
    predictions are gathered to every process and de-duplicated by position before
    rank 0 writes metrics.json, predictions.csv and parity.png and logs them.
    """

    def __init__(self, output_dir: str, run_info: dict) -> None:
        self.output_dir = Path(output_dir)
        self.run_info = dict(run_info)
        self.fit_started: float | None = None
        self.train_seconds: float | None = None
        self.outputs: dict[int, list[dict]] = {}
        self.metrics: dict | None = None

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.fit_started = time.perf_counter()

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.train_seconds = time.perf_counter() - self.fit_started

    def on_test_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.outputs = {i: [] for i in range(len(TEST_SETS))}

    def on_test_batch_end(
        self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx: int = 0
    ) -> None:
        self.outputs[dataloader_idx].append(outputs)

    def on_test_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        dm = trainer.datamodule
        sets = {}
        for i, name in enumerate(TEST_SETS):
            index, pred, std = self._gathered(pl_module, self.outputs[i])
            expected = len(dm.mol_ids(name))
            if len(index) != expected or not np.array_equal(index, np.arange(expected)):
                raise RuntimeError(
                    f"{name} test set: predictions for {len(index)} of {expected} molecules"
                )
            sets[name] = SetPredictions(
                name, dm.mol_ids(name), dm.smiles(name), dm.targets(name), pred, std
            )
        if trainer.global_rank != 0:
            return
        header = {
            **self.run_info,
            "split_hash": dm.split.hash,
            "n_params": int(pl_module.n_params()),
            "train_seconds": self.train_seconds,
            "data": {"sizes": dm.split.sizes(), **dm.feature_facts},
        }
        metrics, figure = write_results(
            self.output_dir,
            sets,
            header,
            float(np.median(dm.train_targets)),
            dm.task.property,
            dm.task.units,
        )
        self.metrics = metrics
        _log_everywhere(trainer, metrics, figure, self.output_dir)

    @staticmethod
    def _gathered(
        pl_module: L.LightningModule, outputs: list[dict]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        index = torch.cat([o["index"] for o in outputs])
        pred = torch.cat([o["pred"] for o in outputs]).float()
        has_std = outputs[0]["std"] is not None
        std = torch.cat([o["std"] for o in outputs]).float() if has_std else None
        if pl_module.trainer.world_size > 1:
            index, pred = (
                pl_module.all_gather(index).flatten(),
                pl_module.all_gather(pred).flatten(),
            )
            std = pl_module.all_gather(std).flatten() if has_std else None
        index, pred = index.cpu().numpy(), pred.cpu().numpy().astype(np.float64)
        order = np.unique(index, return_index=True)[1]  # drops DDP padding duplicates
        std_np = std.cpu().numpy().astype(np.float64)[order] if has_std else None
        return index[order], pred[order], std_np


def _log_everywhere(trainer: L.Trainer, metrics: dict, figure, output_dir: Path) -> None:
    """The test metrics and the parity plot go to every active logger as well."""
    flat = {
        f"test/{s}/{k}": v
        for s in TEST_SETS
        for k, v in metrics[s].items()
        if isinstance(v, int | float) and np.isfinite(v)
    }
    for logger in trainer.loggers:
        logger.log_metrics(flat, step=trainer.global_step)
        if isinstance(logger, WandbLogger):
            logger.experiment.summary.update(flat)
            logger.log_image(key="parity", images=[str(output_dir / "parity.png")])
            logger.log_table(
                key="predictions", dataframe=pd.read_csv(output_dir / "predictions.csv")
            )
        elif isinstance(logger, TensorBoardLogger):
            logger.experiment.add_figure("parity", figure, global_step=trainer.global_step)
        logger.save()
