"""Scoring a checkpoint again on a task's ID and OOD test sets (`evaluate.py
ckpt_path=...`): the model and its data rebuilt from the checkpoint alone."""

from __future__ import annotations

import logging
from pathlib import Path

import lightning as L
from omegaconf import DictConfig, OmegaConf

from oodmol.comparability import OTHER_TASK, SHORTENED
from oodmol.data.datamodule import MoleculeDataModule
from oodmol.data.validate import parse_smiles
from oodmol.inference.checkpoint import read_trained_model
from oodmol.overrides import OverrideError
from oodmol.training.build import apply_matmul_precision, build_datamodule, build_model
from oodmol.training.scoring_callback import TestEvaluation

log = logging.getLogger("oodmol.evaluate")


def score_checkpoint(cfg: DictConfig, out_dir: Path) -> dict:
    """Rebuild the run's model and data from the checkpoint's own config and test it."""
    trained, _ = read_trained_model(cfg.ckpt_path)
    run = trained.config
    changed = _other_data(run, cfg)
    if changed and not cfg.get("allow_other_task"):
        raise OverrideError(
            f"ckpt_path={cfg.ckpt_path} was trained on task={run.task.name} "
            f"split={run.split.name}; scoring it on {' '.join(changed)} would put a model "
            "in another task's place. Leave task= and split= out to score it on its own "
            "test sets, or add allow_other_task=true: the result is then flagged "
            f"[{OTHER_TASK}] and never shown as that task's model"
        )
    trained_on = {"task": run.task.name, "split": run.split.name}
    for group in ("task", "split", "paths"):
        if cfg.get(group) is not None:
            run[group] = cfg[group]
    run.progress, run.num_workers = cfg.progress, cfg.num_workers
    L.seed_everything(run.seed)  # MC-dropout passes sample as in the run's own test
    dm = build_datamodule(run, baseline_fit=trained.baseline)
    trained.restore_baseline(dm.baseline)  # refused here, in one line, if it does not fit
    dm.prepare_data()
    dm.setup("test")
    model = build_model(run, trained.statistics)
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
    entry = trained.run_entry
    shortened = entry.get("budget_overrides") or entry.get("debug")
    flags = [SHORTENED] if shortened else []
    facts = {"config_key": entry.get("config_key"), "flags": flags}
    if changed:
        _check_elements(trained.config, dm)
        facts |= {"flags": [*flags, OTHER_TASK], "trained_on": trained_on}
    evaluation.add_facts(facts)
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


def _other_data(run: DictConfig, cfg: DictConfig) -> list[str]:
    """The `task=`/`split=` overrides that name other data than the run trained on."""
    changed = []
    for group in ("task", "split"):
        given = cfg.get(group)
        if given is None:
            continue
        theirs = _identity(OmegaConf.to_container(run[group], resolve=True))
        ours = _identity(OmegaConf.to_container(given, resolve=True))
        if theirs == ours:
            continue
        named = f"{group}={ours.get('name')}"
        if ours.get("name") == theirs.get("name"):  # the same name on other data or settings
            keys = sorted(k for k in theirs.keys() | ours.keys() if theirs.get(k) != ours.get(k))
            named += f" (the same name, other {', '.join(keys)})"
        changed.append(named)
    return changed


def _identity(node: dict) -> dict:
    """A task's or split's settings without where its files lie (their checksums stay)."""
    return {k: v for k, v in node.items() if k not in ("path", "paths", "data_dir")}


def _check_elements(trained: DictConfig, dm: MoleculeDataModule) -> None:
    """A model scored on another task sees only elements its training data had (where
    its task declares them), as `oodmol predict` checks new molecules."""
    allowed = OmegaConf.select(trained, "task.source.elements")
    if not allowed:
        return
    outside: dict[str, int] = {}
    for name in ("id", "ood"):
        for smiles in dm.smiles(name):
            for element in set(parse_smiles(smiles).elements) - set(allowed):
                outside[element] = outside.get(element, 0) + 1
    if outside:
        counts = ", ".join(f"{e} in {n} molecules" for e, n in sorted(outside.items()))
        raise OverrideError(
            f"the test sets hold elements the model never saw ({counts}; it was trained on "
            f"{', '.join(allowed)}): it cannot be scored on this task"
        )
