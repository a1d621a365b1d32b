"""The test-end callback: evaluate the ID and OOD test sets and write the run's results."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import lightning as L
import numpy as np
import pandas as pd
import torch
from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger
from omegaconf import OmegaConf

from oodmol.comparability import data_flags, ordered
from oodmol.data.datamodule import TEST_SETS
from oodmol.predictions import PREDICTIONS_FILE, SetPredictions, std_columns
from oodmol.run_record import RunRecord
from oodmol.scoring.results import write_results
from oodmol.training.device import device_facts, peak_memory_mb

VARIANCES = ("var_epistemic", "var_aleatoric")


class TestEvaluation(L.Callback):
    """Collects test predictions of every process and writes the run's result files.

    The test loaders are the ID, OOD and validation sets (the last for recalibrating
    uncertainties). Under DDP each process sees part of each set (padded to equal
    length), so the predictions are gathered to every process and de-duplicated by
    position before rank 0 writes the result files and logs them. `calibrators` and
    `evaluators` name the uncertainty recalibrations and metrics to run (`uq.calibrators`,
    `uq.evaluators`; None: all of them).
    """

    def __init__(
        self,
        output_dir: str,
        run_info: dict,
        calibrators: Sequence[str] | None = None,
        evaluators: Sequence[str] | None = None,
    ) -> None:
        self.output_dir = Path(output_dir)
        # from Hydra a nested DictConfig, which json cannot write
        self.run_info = (
            OmegaConf.to_container(run_info) if OmegaConf.is_config(run_info) else dict(run_info)
        )
        self.calibrators = None if calibrators is None else list(calibrators)
        self.evaluators = None if evaluators is None else list(evaluators)
        self.facts: dict = {"train_seconds": None}
        self.outputs: dict[int, list[dict]] = {}
        self.metrics: dict | None = None

    def add_facts(self, facts: dict) -> None:
        self.facts.update(facts)

    def on_test_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.outputs = {i: [] for i in range(len(trainer.datamodule.predicted_sets()))}

    def on_test_batch_end(
        self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx: int = 0
    ) -> None:
        self.outputs[dataloader_idx].append(outputs)

    def on_test_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        dm = trainer.datamodule
        sets = {}
        for i, name in enumerate(dm.predicted_sets()):
            index, pred, variances, flags = self._gathered(pl_module, self.outputs[i])
            expected = len(dm.mol_ids(name))
            if len(index) != expected or not np.array_equal(index, np.arange(expected)):
                raise RuntimeError(
                    f"{name} test set: predictions for {len(index)} of {expected} molecules"
                )
            sets[name] = SetPredictions(
                name,
                dm.mol_ids(name),
                dm.smiles(name),
                dm.targets(name),
                pred + dm.offsets(name),  # a baseline's part (Δ-learning), 0 without one
                **std_columns(*variances),
                flags=flags,
            )
        if trainer.global_rank != 0:
            return
        data = {"sizes": dm.split.sizes(), **dm.feature_facts}
        header = {
            **self.run_info,
            "status": "complete",
            "split_hash": dm.split.hash,
            "n_params": int(pl_module.n_params()),
            **pl_module.fit_facts(),
            "property": dm.task.property,
            "units": dm.task.units,
            "data": data,
            **self.facts,
        }
        header["flags"] = ordered([*self.facts.get("flags", []), *data_flags(data)])
        device = trainer.strategy.root_device
        header["training"] = {
            **header.get("training", {}),
            "device": device_facts(trainer),  # now the tested sets are where they were read
            "test_peak_memory_mb": round(peak_memory_mb(device), 1),
        }
        record, figures = write_results(
            self.output_dir,
            sets,
            RunRecord.of(header),
            float(np.median(dm.targets("train"))),
            dm.task.property,
            dm.task.units,
            calibrators=self.calibrators,
            evaluators=self.evaluators,
            train_range=(float(dm.targets("train").min()), float(dm.targets("train").max())),
        )
        self.metrics = record.to_json()
        _log_everywhere(trainer, self.metrics, figures, self.output_dir)

    @staticmethod
    def _gathered(
        pl_module: L.LightningModule, outputs: list[dict]
    ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray | None], dict[str, np.ndarray] | None]:
        """Positions, means, variance components (None where the model has none) and the
        model's per-molecule flags (None where it raises none)."""
        columns = {"index": torch.cat([o["index"] for o in outputs])}
        for key in ("pred", *VARIANCES):
            if outputs[0][key] is not None:
                columns[key] = torch.cat([o[key] for o in outputs]).double()
        names = list(outputs[0].get("flags") or {})
        for name in names:
            columns[f"flag {name}"] = torch.cat([o["flags"][name] for o in outputs]).long()
        if pl_module.trainer.world_size > 1:
            columns = {k: pl_module.all_gather(v).flatten() for k, v in columns.items()}
        columns = {k: v.cpu().numpy() for k, v in columns.items()}
        index, order = np.unique(columns["index"], return_index=True)  # drops DDP padding
        variances = [columns[k][order] if k in columns else None for k in VARIANCES]
        flags = {name: columns[f"flag {name}"][order].astype(bool) for name in names}
        return index, columns["pred"][order], variances, flags or None


def _log_everywhere(trainer: L.Trainer, metrics: dict, figures: dict, output_dir: Path) -> None:
    """The test metrics (uncertainty metrics included) and the figures go to every active
    logger as well."""
    flat = {
        f"test/{s}/{k}": v
        for s in TEST_SETS
        for k, v in metrics[s].items()
        if isinstance(v, int | float) and np.isfinite(v)
    }
    for section in ("uq", "uq_recalibrated", "stretched"):  # metric subtrees, not method
        tree = {k: v for k, v in metrics.get(section, {}).items() if isinstance(v, dict)}
        flat.update(_flatten(tree, f"test/{section}"))
    for logger in trainer.loggers:
        logger.log_metrics(flat, step=trainer.global_step)
        if isinstance(logger, WandbLogger):
            logger.experiment.summary.update(flat)
            for name in figures:
                logger.log_image(key=name, images=[str(output_dir / f"{name}.png")])
            logger.log_table(
                key="predictions", dataframe=pd.read_csv(output_dir / PREDICTIONS_FILE)
            )
        elif isinstance(logger, TensorBoardLogger):
            for name, figure in figures.items():
                logger.experiment.add_figure(name, figure, global_step=trainer.global_step)
        logger.save()


def _flatten(tree: dict, prefix: str) -> dict[str, float]:
    """Finite numbers of a nested dict, keyed by their slash-joined path."""
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}/{key}"))
        elif isinstance(value, int | float) and not isinstance(value, bool) and np.isfinite(value):
            flat[f"{prefix}/{key}"] = value
    return flat
