"""Train and test one model on one task: python train.py model=<m> task=<t> split=<s>."""

from __future__ import annotations

import json
import logging

import hydra
import lightning as L
import torch
from hydra.utils import instantiate
from lightning.pytorch.loggers import WandbLogger
from omegaconf import DictConfig

from oodmol.data.datamodule import MoleculeDataModule
from oodmol.runs import SaveRunConfig, build_datamodule, build_model
from oodmol.uq.members import run_members

log = logging.getLogger("oodmol.train")


def instantiate_group(group: DictConfig | None) -> list:
    """Instantiate every non-null entry of a config group such as callbacks or logger."""
    return [instantiate(c) for c in (group or {}).values() if c is not None]


def train(cfg: DictConfig) -> dict | float | None:
    """Fit and test one model into cfg.paths.output_dir; returns its test metrics, or
    with `optimized_metric` the best validation score, untested."""
    L.seed_everything(cfg.seed, workers=True)
    dm = build_datamodule(cfg)
    dm.prepare_data()
    dm.setup("fit")
    model = build_model(cfg, dm)
    callbacks = [*instantiate_group(cfg.callbacks), SaveRunConfig(cfg)]
    loggers = instantiate_group(cfg.logger)
    trainer: L.Trainer = instantiate(cfg.trainer, callbacks=callbacks, logger=loggers)
    try:
        return fit_and_test(cfg, trainer, model, dm, callbacks)
    finally:  # a multirun's next job (same process) must get a W&B run of its own
        for logger in loggers:
            if isinstance(logger, WandbLogger):
                logger.experiment.finish()


def fit_and_test(
    cfg: DictConfig,
    trainer: L.Trainer,
    model: L.LightningModule,
    dm: MoleculeDataModule,
    callbacks: list,
) -> dict | float | None:
    if cfg.train:
        trainer.fit(model, datamodule=dm, ckpt_path=cfg.ckpt_path)
    if cfg.optimized_metric:  # a hyperparameter sweep's objective: validation only
        return float(trainer.checkpoint_callback.best_model_score)
    if not cfg.test:
        return None
    best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
    trainer.test(model, datamodule=dm, ckpt_path=best or None, weights_only=True)
    evaluation = next(c for c in callbacks if hasattr(c, "metrics"))
    if trainer.global_rank == 0 and evaluation.metrics:
        summary = {s: evaluation.metrics[s] for s in ("id", "ood")}
        log.info("test metrics:\n%s", json.dumps(summary, indent=2))
        print(f"[oodmol] results in {evaluation.output_dir}")
    return evaluation.metrics


@hydra.main(config_path="configs", config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> dict | float | None:
    """One model, or the members of an ensemble (`uq.members`) and their combination."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    return run_members(cfg, train)


if __name__ == "__main__":
    main()
