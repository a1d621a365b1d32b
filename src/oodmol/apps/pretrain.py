"""Self-supervised pretraining of a SMILES encoder, whose output folder fine-tuning starts
from: the work of `oodmol pretrain` (`oodmol.cli.pretrain`, which says what it writes)."""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

import lightning as L
import numpy as np
import torch
from hydra.utils import get_class, instantiate
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from omegaconf import DictConfig, OmegaConf

from oodmol.config import config_dir
from oodmol.data.statistics import FeatureFact
from oodmol.data.tokens import TokenFeatures
from oodmol.errors import UsageError
from oodmol.io import atomic_write_json
from oodmol.overrides import names_of
from oodmol.pretraining.corpus import Corpus, build_corpus, holdout_split
from oodmol.pretraining.module import Pretraining, eval_loader, train_loader

log = logging.getLogger("oodmol.pretrain")
SUMMARY = "pretrain_summary.json"
LAST = "last.ckpt"


def run(cfg: DictConfig) -> dict:
    """Pretrain as `cfg` says; the summary written to out/pretrain_summary.json."""
    started = time.perf_counter()
    if cfg.threads:
        torch.set_num_threads(int(cfg.threads))
    corpus = read_corpus(cfg)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    train_at, held_at = holdout_split(len(corpus.smiles), float(cfg.holdout), int(cfg.seed))
    train_smiles = [corpus.smiles[i] for i in train_at]
    held_smiles = [corpus.smiles[i] for i in held_at]
    features: TokenFeatures = instantiate(cfg.model.features)
    checkpoint = out / "checkpoints" / LAST
    resuming = bool(cfg.resume) and checkpoint.is_file()
    if resuming:  # the tokenizer the checkpoint was trained with
        features.source = str(out / "tokenizer.json")
    features.fit_smiles(train_smiles)
    facts = features.facts()
    L.seed_everything(int(cfg.seed), workers=True)
    objective = build_objective(cfg, facts)
    corruption = instantiate(
        cfg.model.pretraining.corruption,
        tokenizer=features.tokenizer,
        probability=float(cfg.mask_probability),
    )
    module = Pretraining(
        objective, corruption, float(cfg.lr), float(cfg.weight_decay),
        float(cfg.warmup_fraction), int(cfg.seed),
    )  # fmt: skip
    train_set = features.token_set(train_smiles, None, "train")
    held_set = features.token_set(held_smiles, None, "holdout")
    train_batches = train_loader(train_set, int(cfg.batch_size), int(cfg.seed), features.collate)
    held_batches = eval_loader(held_set, int(cfg.batch_size), features.collate)
    features.tokenizer.save(str(out / "tokenizer.json"))
    trainer = build_trainer(cfg, out, checkpoint)
    start_loss = None
    if len(held_set) and not resuming:
        start_loss = trainer.validate(module, held_batches, verbose=False)[0]["val_loss"]
    trainer.fit(
        module, train_batches, held_batches if len(held_set) else None,
        ckpt_path=str(checkpoint) if resuming else None, weights_only=True,
    )  # fmt: skip
    trainer.save_checkpoint(str(checkpoint), weights_only=False)
    final_loss = None
    if len(held_set):
        final_loss = trainer.validate(module, held_batches, verbose=False)[0]["val_loss"]
    objective.save_pretrained(out)
    summary = {
        "model": cfg.model.name,
        "out": str(out),
        "corpus": {**corpus.report, "train": len(train_set), "holdout": len(held_set)},
        "tokenizer": {
            "source": cfg.model.tokenizer,
            "vocab_size": facts["vocab_size"],
            "truncated": features.truncated,
            "unknown_tokens": features.imputed,
        },
        "objective": OmegaConf.to_container(cfg.model.pretraining, resolve=True),
        "settings": {k: OmegaConf.select(cfg, k) for k in SETTINGS},
        "encoder": OmegaConf.to_container(cfg.model.module.backbone, resolve=True),
        "parameters": sum(p.numel() for p in objective.parameters()),
        "steps": trainer.global_step,
        "epochs": trainer.current_epoch,
        "resumed": resuming,
        "loss": {
            "train_last_steps": module.recent_train_loss(),
            "holdout_start": _number(start_loss),
            "holdout_final": _number(final_loss),
        },
        "seconds": round(time.perf_counter() - started, 1),
    }
    atomic_write_json(out / SUMMARY, summary)
    print(json.dumps({k: summary[k] for k in ("corpus", "steps", "loss")}, indent=2))
    print(f"[oodmol] pretrained {cfg.model.name} in {out}: python train.py model={cfg.model.name} "
          f"task=<task> model.pretrained={out}")  # fmt: skip
    return summary


SETTINGS = (
    "seed", "max_epochs", "max_steps", "max_time", "batch_size", "lr", "weight_decay",
    "warmup_fraction", "mask_probability", "holdout", "max_molecules", "gradient_clip_norm",
)  # fmt: skip


def build_trainer(cfg: DictConfig, out: Path, checkpoint: Path) -> L.Trainer:
    """A single-device Trainer with the budget of `cfg`, the losses in out/logs and
    the last state in `checkpoint` (saved after each validation, and at the end)."""
    return L.Trainer(
        max_epochs=int(cfg.max_epochs),
        max_steps=-1 if cfg.max_steps is None else int(cfg.max_steps),
        max_time=cfg.max_time,
        val_check_interval=cfg.val_check_interval,
        check_val_every_n_epoch=None if isinstance(cfg.val_check_interval, int) else 1,
        gradient_clip_val=cfg.gradient_clip_norm,
        accelerator=cfg.accelerator,
        devices=1,
        logger=CSVLogger(str(out), name="logs", version=""),
        callbacks=[
            ModelCheckpoint(
                dirpath=str(checkpoint.parent),
                filename=checkpoint.stem,
                enable_version_counter=False,
            )
        ],
        enable_progress_bar=bool(cfg.progress),
        enable_model_summary=False,
        num_sanity_val_steps=0,
        log_every_n_steps=10,
    )


def read_corpus(cfg: DictConfig) -> Corpus:
    """The corpus less test molecules, and at most `max_molecules` of it (seeded)."""
    corpus_arg = cfg.corpus
    file = not OmegaConf.is_list(corpus_arg) and Path(str(corpus_arg)).is_file()
    names = [] if file else [str(n) for n in names_of(corpus_arg)]
    exclude = [str(n) for n in names_of(cfg.exclude or [])]
    known = {p.stem for p in (config_dir() / "task").glob("*.yaml")}
    for name in [*names, *exclude]:
        if name not in known:
            raise UsageError(
                f"corpus or exclude names {name!r}, neither a file nor a task "
                f"(tasks: {', '.join(sorted(known))})"
            )
    corpus = build_corpus(
        str(corpus_arg) if file else names,
        exclude,
        str(cfg.split),
        Path(cfg.paths.data_dir),
        str(cfg.smiles_column),
        bool(cfg.progress),
    )
    if corpus.report["invalid"]:
        print(
            f"oodmol pretrain: {corpus.report['invalid']} invalid SMILES left out, e.g. "
            f"{corpus.report['invalid_examples']}",
            file=sys.stderr,
        )
    if cfg.max_molecules is not None and len(corpus.smiles) > int(cfg.max_molecules):
        order = np.random.default_rng(int(cfg.seed)).permutation(len(corpus.smiles))
        chosen = sorted(order[: int(cfg.max_molecules)].tolist())
        corpus = Corpus([corpus.smiles[i] for i in chosen], corpus.report)
        corpus.report["subset"] = len(chosen)
    print(
        f"[oodmol] corpus: {corpus.report['read']} read, {corpus.report['invalid']} invalid, "
        f"{corpus.report['duplicates']} repeated, {corpus.report['removed_test_molecules']} "
        f"test molecules of {corpus.report['excluded_tasks']} removed "
        f"({corpus.report['split']} split): {len(corpus.smiles)} molecules"
    )
    if len(corpus.smiles) < 2:
        raise ValueError(f"the corpus has {len(corpus.smiles)} molecules left; it needs 2 or more")
    return corpus


def build_objective(cfg: DictConfig, facts: dict[str, int]) -> torch.nn.Module:
    """The model's objective with its backbone's settings, and the tokenizer's facts
    where the model's statistics take them (vocabulary size, special-token ids)."""
    settings = OmegaConf.to_container(cfg.model.module.backbone, resolve=True)
    settings.pop("_target_")
    for path, spec in (cfg.model.get("statistics") or {}).items():
        statistic = instantiate(spec)
        if not path.startswith("backbone.") or not isinstance(statistic, FeatureFact):
            raise ValueError(
                f"model.statistics.{path}: pretraining knows the tokenizer's facts only"
            )
        settings[path.removeprefix("backbone.")] = facts[statistic.name]
    return get_class(cfg.model.pretraining.objective)(**settings)


def _number(value: float | torch.Tensor | None) -> float | None:
    return None if value is None else float(value)
