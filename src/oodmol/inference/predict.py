"""Predicting new molecules with a trained model:

    oodmol predict ckpt_path=<file.ckpt> input=<file.csv with a smiles column> out=<file.csv>

The checkpoint alone rebuilds the model: its config, the training statistics it was
built from, and what its feature set learnt from the training split. New molecules go
through the checks training molecules went through (RDKit parsing, sanitisation and
canonical SMILES, the training data set's elements and size limits) and the same
featuriser, in worker processes, so that a molecule that crashes RDKit or overruns its
time limit is refused alone. No input row is lost: one that cannot be predicted keeps its
line with an empty prediction and the reason, and every such row is named on the way.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path

import lightning as L
import numpy as np
import pandas as pd
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from torch.utils.data import DataLoader

from oodmol.config import gpu_present
from oodmol.data.baseline import LinearBaseline
from oodmol.data.featurize.base import Featurizer
from oodmol.data.limits import DEFAULT_LIMITS, MoleculeLimits
from oodmol.data.sources.csv_source import read_smiles_column
from oodmol.data.store import FeatureStore
from oodmol.data.table import MoleculeTable
from oodmol.data.validate import parse_all
from oodmol.inference.checkpoint import CheckpointError, TrainedModel, read_trained_model
from oodmol.io import atomic_write_text
from oodmol.overrides import OverrideError
from oodmol.training.build import (
    FEATURES_KEY,
    apply_matmul_precision,
    build_baseline,
    build_model,
)
from oodmol.training.memory import halving_on_oom, plan_memory

log = logging.getLogger(__name__)
VARIANCES = ("var_epistemic", "var_aleatoric")


@dataclass
class Predicted:
    """What a prediction run did: where it wrote, and how many rows it could predict."""

    out: Path
    rows: int
    predicted: int
    rejected: dict[int, str]  # line -> why it has no prediction


def predict_file(cfg: DictConfig) -> Predicted:
    if Path(cfg.out).resolve() == Path(cfg.input).resolve():
        raise OverrideError(
            f"out={cfg.out} would overwrite the input; write the predictions to another file"
        )
    trained, _ = read_trained_model(cfg.ckpt_path)
    run = trained.config
    rows = read_smiles_column(Path(cfg.input), cfg.smiles_column)
    elements = OmegaConf.select(run, "task.source.elements")  # a CSV task allows any
    canonical, rejected = _validated(rows, elements, cfg.progress, _limits(run))
    lines = np.array(sorted(canonical), dtype=np.int64)
    predictions: dict[str, np.ndarray] = {}
    if len(lines):
        smiles = [canonical[int(i)] for i in lines]
        store = _featurised(instantiate(run.model.featurizer), lines, smiles, cfg)
        for line, reason in store.failed.items():
            rejected[line] = f"no features: {reason}"
        baseline = _baseline(trained, lines, smiles, cfg)
        if baseline is not None:
            for line, reason in baseline.unusable(lines).items():
                rejected.setdefault(line, f"no baseline estimate: {reason}")
        usable = np.array([i for i in lines if int(i) not in rejected], dtype=np.int64)
        predictions = _predictions(cfg, trained, store, usable) if len(usable) else {}
        if baseline is not None and predictions:
            predictions["pred"] = predictions["pred"] + baseline.values(predictions["line"])
    frame = _output(rows, canonical, rejected, predictions)
    atomic_write_text(Path(cfg.out), frame.to_csv(index=False))
    return Predicted(Path(cfg.out), len(rows), len(rows) - len(rejected), rejected)


def _limits(run: DictConfig) -> MoleculeLimits:
    """The limits the run's training molecules were validated with: its data source's,
    a CSV task's own, or (a run from before they existed) the defaults."""
    for key in ("task.source.limits", "task.limits"):
        limits = OmegaConf.select(run, key)
        if limits is not None:
            return MoleculeLimits(**limits)
    return DEFAULT_LIMITS


def _validated(
    rows: list[tuple[int, str]],
    elements: list[str] | None,
    progress: bool,
    limits: MoleculeLimits = DEFAULT_LIMITS,
) -> tuple[dict[int, str], dict[int, str]]:
    """Canonical SMILES by line of the rows a model may see, and why each other row may
    not: as `oodmol.data.validate` treats training data (no molecule is dropped as a
    duplicate: every row gets its prediction; one over the limits, or that crashes or
    overruns its worker, is refused with the reason)."""
    canonical, rejected = {}, {}
    parsed = parse_all([smiles for _, smiles in rows], progress, limits=limits)
    allowed = set(elements) if elements else None
    for (line, smiles), result in zip(rows, parsed, strict=True):
        if not smiles:
            rejected[line] = "empty SMILES"
        elif result.canonical is None:
            rejected[line] = result.error
        elif allowed is not None and not set(result.elements) <= allowed:
            outside = ",".join(sorted(set(result.elements) - allowed))
            rejected[line] = f"element {outside} outside the training data's {sorted(allowed)}"
        else:
            canonical[line] = result.canonical
    return canonical, rejected


def _featurised(
    featurizer: Featurizer, lines: np.ndarray, smiles: list[str], cfg: DictConfig
) -> FeatureStore:
    """The molecules' features by line, in a cache of their own (a second prediction of
    the same file reuses it); molecules the featuriser cannot represent are recorded."""
    return FeatureStore.build_or_open(
        featurizer, _table(lines, smiles), _cache(cfg), progress=cfg.progress
    )


def _table(lines: np.ndarray, smiles: list[str]) -> MoleculeTable:
    digest = hashlib.sha256("\n".join(smiles).encode()).hexdigest()[:12]
    return MoleculeTable(f"predict-{digest}", lines, np.array(smiles, dtype=str), {})


def _cache(cfg: DictConfig) -> Path:
    return Path(cfg.paths.data_dir) / "predict"


def _baseline(
    trained: TrainedModel, lines: np.ndarray, smiles: list[str], cfg: DictConfig
) -> LinearBaseline | None:
    """Δ-learning's baseline with the checkpoint's fit, on the molecules' estimates (in a
    cache of their own), or None for a model without one."""
    if trained.baseline is None:
        return None
    baseline = build_baseline(trained.config)
    trained.restore_baseline(baseline)
    baseline.open(_table(lines, smiles), _cache(cfg).parent, cfg.progress, folder="predict")
    return baseline


def _predictions(
    cfg: DictConfig, trained: TrainedModel, store: FeatureStore, lines: np.ndarray
) -> dict[str, np.ndarray]:
    """Mean, variance components and the model's per-molecule flags by line, as the
    model predicts at test time (MC dropout samples with the run's seed)."""
    run = trained.config
    features = instantiate(run.model.features)
    try:
        features.load_state_dict(trained.features)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        reason = f"it lacks {error}" if isinstance(error, KeyError) else str(error)
        raise CheckpointError(
            f"ckpt_path={trained.path}: what its feature set learnt ({FEATURES_KEY}) does not "
            f"fit its model.features: {reason}; use the checkpoint train.py wrote"
        ) from None
    dataset = features.dataset(store, lines, None, "predict")
    model = build_model(run, trained.statistics)
    on_gpu = cfg.accelerator in ("gpu", "cuda") or (cfg.accelerator == "auto" and gpu_present())
    plan = plan_memory(  # batches that fit this machine, measured on the largest molecules
        model,
        features.collate,
        torch.device("cuda" if on_gpu else "cpu"),
        [dataset],
        eval_batch_size=run.eval_batch_size,
        fraction=cfg.memory_fraction,
        limit_mb=cfg.memory_limit_mb,
    )
    model.cpu()
    apply_matmul_precision(run)

    def predict(batch_size: int) -> list[dict]:
        loader = DataLoader(dataset, batch_size=batch_size, collate_fn=features.collate)
        L.seed_everything(run.seed)
        trainer = L.Trainer(
            accelerator=cfg.accelerator,
            devices=1,
            precision=run.trainer.precision,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=cfg.progress,
        )
        return trainer.predict(
            model, dataloaders=loader, ckpt_path=cfg.ckpt_path, weights_only=True
        )

    outputs = halving_on_oom(predict, plan.eval_batch if plan else run.eval_batch_size)
    order = torch.cat([o["index"] for o in outputs]).numpy()
    columns = {"line": lines[order]}
    for name in ("pred", *VARIANCES):
        if outputs[0][name] is not None:
            columns[name] = torch.cat([o[name] for o in outputs]).double().numpy()
    for flag in outputs[0].get("flags") or {}:  # e.g. the RT's malformed decodes
        columns[flag] = torch.cat([o["flags"][flag] for o in outputs]).long().cpu().numpy()
    return columns


def _output(
    rows: list[tuple[int, str]],
    canonical: dict[int, str],
    rejected: dict[int, str],
    predictions: dict[str, np.ndarray],
) -> pd.DataFrame:
    """One row per input row, in the input's order."""
    frame = pd.DataFrame(rows, columns=["line", "smiles"])
    frame["canonical_smiles"] = frame["line"].map(canonical)
    if predictions:
        found = pd.DataFrame(predictions).set_index("line")
        frame["y_pred"] = frame["line"].map(found["pred"])
        variances = [found[v] for v in VARIANCES if v in found]
        if variances:
            frame["y_std"] = frame["line"].map(np.sqrt(sum(variances)))
        for name in VARIANCES:
            if name in found:
                frame[name.replace("var", "y_std")] = frame["line"].map(np.sqrt(found[name]))
        for flag in found.columns.difference(["pred", *VARIANCES]):
            frame[flag] = frame["line"].map(found[flag]).astype("Int64")
    else:
        frame["y_pred"] = np.nan
    frame["error"] = frame["line"].map(rejected).fillna("")
    return frame
