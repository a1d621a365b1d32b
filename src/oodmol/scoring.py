"""Scoring on a task's ID and OOD test sets what was not scored by its own run: a
checkpoint (rebuilt from the checkpoint alone), or predictions made outside oodmol (a
CSV of `smiles,y_pred` or `mol_id,y_pred`, optionally `y_std`)."""

from __future__ import annotations

import logging
from pathlib import Path

import lightning as L
import numpy as np
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from oodmol.comparability import SHORTENED, coverage_flags
from oodmol.data.task import load_split, load_task
from oodmol.eval.callbacks import TestEvaluation
from oodmol.eval.external import check_values, read_predictions, score_sets
from oodmol.results import write_results
from oodmol.runs import (
    CONFIG_KEY,
    RUN_KEY,
    STATISTICS_KEY,
    apply_matmul_precision,
    build_datamodule,
    build_model,
)

log = logging.getLogger("oodmol.evaluate")


def score_checkpoint(cfg: DictConfig, out_dir: Path) -> dict:
    """Rebuild the run's model and data from the checkpoint's own config and test it."""
    checkpoint = torch.load(cfg.ckpt_path, map_location="cpu", weights_only=True)
    if CONFIG_KEY not in checkpoint:
        raise KeyError(f"{cfg.ckpt_path} has no {CONFIG_KEY!r}: not written by train.py")
    run = OmegaConf.create(checkpoint[CONFIG_KEY])
    for group in ("task", "split", "paths"):
        if cfg.get(group) is not None:
            run[group] = cfg[group]
    run.progress, run.num_workers = cfg.progress, cfg.num_workers
    L.seed_everything(run.seed)  # MC-dropout passes sample as in the run's own test
    dm = build_datamodule(run)
    dm.prepare_data()
    dm.setup("test")
    model = build_model(run, checkpoint[STATISTICS_KEY])
    info = {
        "task": run.task.name,
        "split": run.split.name,
        "model": run.model.name,
        "seed": run.seed,
        "checkpoint": str(cfg.ckpt_path),
    }
    uq = run.get("uq") or {}
    if uq:
        info["uq"] = {"method": uq.name, "member": uq.member}
    evaluation = TestEvaluation(str(out_dir), info, uq.get("calibrators"), uq.get("evaluators"))
    entry = checkpoint.get(RUN_KEY) or {}
    shortened = entry.get("budget_overrides") or entry.get("debug")
    evaluation.add_facts(
        {"config_key": entry.get("config_key"), "flags": [SHORTENED] if shortened else []}
    )
    apply_matmul_precision(run)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        callbacks=[evaluation],
        enable_progress_bar=cfg.progress,
        default_root_dir=str(out_dir),
    )
    trainer.test(model, datamodule=dm, ckpt_path=cfg.ckpt_path, weights_only=True)
    return evaluation.metrics


def score_file(cfg: DictConfig, out_dir: Path) -> dict:
    """Score an external predictions CSV (`smiles,y_pred` or `mol_id,y_pred`)."""
    if cfg.get("task") is None or cfg.get("split") is None:
        raise ValueError("scoring a predictions file needs task=<task> and split=<split>")
    task = instantiate(cfg.task)
    data_dir = Path(cfg.paths.data_dir)
    data = load_task(task, data_dir, cfg.progress)
    split = load_split(data, instantiate(cfg.split), data_dir)
    frame, report = read_predictions(Path(cfg.predictions), data)
    frame = check_values(frame, data, split, Path(cfg.predictions))
    sets = score_sets(frame, data, split, report)
    for name, finding in report.items():
        if isinstance(finding, dict) and finding["count"]:
            log.warning("%s: %d (%s)", name, finding["count"], ", ".join(finding["examples"]))
    header = {
        "task": task.name,
        "split": cfg.split.name,
        "model": cfg.model_name,
        "seed": cfg.seed,
        "status": "complete",
        "split_hash": split.hash,
        "n_params": None,
        "train_seconds": None,
        "predictions_file": str(cfg.predictions),
        "coverage": report,
        "flags": coverage_flags(report),
    }
    train_y = data.y[data.table.rows_of(split.sets["train"])]
    metrics, _ = write_results(
        out_dir, sets, header, float(np.median(train_y)), task.property, task.units
    )
    return metrics
