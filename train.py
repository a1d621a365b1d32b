"""Train and test one model on one task: python train.py model=<m> task=<t> split=<s>."""

from __future__ import annotations

import json
import logging

import hydra
import lightning as L
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig

from oodmol.runs import SaveRunConfig, build_datamodule, build_model

log = logging.getLogger("oodmol.train")


def instantiate_group(group: DictConfig | None) -> list:
    """Instantiate every non-null entry of a config group such as callbacks or logger."""
    return [instantiate(c) for c in (group or {}).values() if c is not None]


@hydra.main(config_path="configs", config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> dict | None:
    L.seed_everything(cfg.seed, workers=True)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    dm = build_datamodule(cfg)
    dm.prepare_data()
    dm.setup("fit")
    model = build_model(cfg, dm)
    callbacks = [*instantiate_group(cfg.callbacks), SaveRunConfig(cfg)]
    trainer: L.Trainer = instantiate(
        cfg.trainer, callbacks=callbacks, logger=instantiate_group(cfg.logger)
    )
    if cfg.train:
        trainer.fit(model, datamodule=dm, ckpt_path=cfg.ckpt_path)
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


if __name__ == "__main__":
    main()
