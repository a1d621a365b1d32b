"""Building a run's objects from its composed config, shared by train.py and evaluate.py."""

from __future__ import annotations

import inspect
from typing import Any

import lightning as L
import torch
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf

from oodmol.data.baseline import LinearBaseline
from oodmol.data.datamodule import MoleculeDataModule
from oodmol.data.features import FeatureSet
from oodmol.data.geometry_checks import geometry_featurizers
from oodmol.data.weighting import TailWeights
from oodmol.overrides import OverrideError
from oodmol.uq.estimators import estimator_from_config

CONFIG_KEY = "oodmol_config"
RUN_KEY = "oodmol_run"  # the run's configuration key and identity
STATISTICS_KEY = "oodmol_statistics"  # the training statistics the model was built from
FEATURES_KEY = "oodmol_features"  # what the feature set learnt from the training split
BASELINE_KEY = "oodmol_baseline"  # Δ-learning's fitted baseline (intercept, slopes), if any


def build_datamodule(cfg: DictConfig, baseline_fit: dict | None = None) -> MoleculeDataModule:
    """The run's data; where the uq estimator resamples (bootstrap), a member's training
    set is a resample drawn with the run's seed, so every member draws a different one.
    `baseline_fit`: a trained model's Δ-learning fit, used instead of fitting anew."""
    bootstrap = estimator_from_config(cfg.get("uq")).resamples
    return MoleculeDataModule(
        task=instantiate(cfg.task),
        split=instantiate(cfg.split),
        featurizer=instantiate(cfg.model.featurizer),
        features=instantiate(cfg.model.features),
        data_dir=cfg.paths.data_dir,
        batch_size=cfg.model.batch_size,
        eval_batch_size=cfg.eval_batch_size,
        num_workers=cfg.num_workers,
        data_on_device=cfg.get("data_on_device", "auto"),
        progress=cfg.progress,
        bootstrap_seed=cfg.seed if bootstrap else None,
        max_molecules=cfg.get("max_molecules"),
        seed=cfg.seed,
        holdout=cfg.protocol.holdout,
        group_by_size=cfg.model.get("group_by_size", False),
        geometry_filter=geometry_featurizers(cfg.get("geometry_filter")),
        baseline=build_baseline(cfg),
        baseline_fit=baseline_fit,
        weighting=build_weighting(cfg),
    )


def build_baseline(cfg: DictConfig) -> LinearBaseline | None:
    """The run's Δ-learning baseline (`baseline=`), or None (`baseline=none`)."""
    return _optional_group(cfg, "baseline")


def build_weighting(cfg: DictConfig) -> TailWeights | None:
    """The run's training weights (`weighting=`), or None (`weighting=none`)."""
    return _optional_group(cfg, "weighting")


def _optional_group(cfg: DictConfig, group: str) -> Any:
    """The object a group's choice builds, or None for a choice that builds nothing
    (`none`: no `_target_`) or a config without the group (an older checkpoint's)."""
    node = cfg.get(group)
    return instantiate(node) if node is not None and node.get("_target_") else None


def training_statistics(cfg: DictConfig, dm: MoleculeDataModule) -> dict[str, Any]:
    """The statistics the model's config declares (`model.statistics`: a path inside
    `model.module` → a `oodmol.data.statistics.Statistic`), of the training split."""
    declared = cfg.model.get("statistics") or {}
    return dm.statistics({path: instantiate(spec) for path, spec in declared.items()})


def build_model(cfg: DictConfig, statistics: dict[str, Any]) -> L.LightningModule:
    """The model's module, built with the training statistics it declared (each at its
    path) and the uq estimator's module arguments (a mean-variance likelihood, MC
    dropout); the config itself is left as it is."""
    arguments: dict[str, Any] = {}
    for path, value in statistics.items():
        *parents, name = path.split(".")
        node = arguments
        for parent in parents:
            node = node.setdefault(parent, {})
        node[name] = value
    for name, value in uq_module_arguments(cfg).items():
        if name in arguments:
            raise OverrideError(f"uq={cfg.uq.name} and model.statistics both set {name!r}")
        arguments[name] = value
    return instantiate(cfg.model.module, **arguments)


def apply_matmul_precision(cfg: DictConfig) -> None:
    """The run's float32 matrix-product precision (`matmul_precision`; "high": TF32 on
    GPUs that have it, set by `trainer=gpu`). torch keeps it per process, so each entry
    point that runs a model sets it from the run's own config."""
    torch.set_float32_matmul_precision(cfg.get("matmul_precision") or "highest")


def uq_module_arguments(cfg: DictConfig) -> dict:
    """What the uq estimator adds to the model's module, refused with a clear message when
    the model's module class does not take it (e.g. MC dropout for a random forest)."""
    uq = cfg.get("uq")
    extra = estimator_from_config(uq).module_arguments()
    if not extra:
        return {}
    target = get_class(cfg.model.module._target_)
    accepted = inspect.signature(target).parameters
    unknown = sorted(set(extra) - set(accepted))
    if unknown:
        raise OverrideError(
            f"uq={uq.name} sets {unknown} on the model, which {target.__name__} "
            f"(model={cfg.model.name}) does not take; use a neural model or another uq method"
        )
    return extra


class SaveRunConfig(L.Callback):
    """Stores in every checkpoint what rebuilds its model without the training data: the
    resolved run config, the training statistics the model was built from, and what the
    feature set learnt from the training split, and Δ-learning's fitted baseline; and
    the run's entry (configuration key, identity, budget overrides), so a resume can check
    it continues the same run. All plain containers and tensors: a checkpoint loads
    weights-only."""

    def __init__(
        self,
        cfg: DictConfig,
        run_entry: dict,
        statistics: dict,
        features: FeatureSet,
        baseline: dict | None = None,
    ) -> None:
        self.config = OmegaConf.to_container(cfg, resolve=True)
        self.run_entry = run_entry
        self.statistics = statistics
        self.features = features
        self.baseline = baseline

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        checkpoint[CONFIG_KEY] = self.config
        checkpoint[RUN_KEY] = self.run_entry
        checkpoint[STATISTICS_KEY] = self.statistics
        checkpoint[FEATURES_KEY] = self.features.state_dict()
        if self.baseline is not None:
            checkpoint[BASELINE_KEY] = self.baseline
