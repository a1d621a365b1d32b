"""Building a run's objects from its composed config, shared by train.py and evaluate.py."""

from __future__ import annotations

import inspect

import lightning as L
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf, open_dict

from oodmol.data.datamodule import MoleculeDataModule
from oodmol.uq.estimators import estimator_from_config

CONFIG_KEY = "oodmol_config"
RUN_KEY = "oodmol_run"  # the run's configuration key and identity


def build_datamodule(cfg: DictConfig) -> MoleculeDataModule:
    """The run's data; where the uq estimator resamples (bootstrap), a member's training
    set is a resample drawn with the run's seed, so every member draws a different one."""
    bootstrap = estimator_from_config(cfg.get("uq")).resamples
    return MoleculeDataModule(
        task=instantiate(cfg.task),
        split=instantiate(cfg.split),
        featurizer=instantiate(cfg.model.featurizer),
        features=instantiate(cfg.model.features),
        data_dir=cfg.paths.data_dir,
        batch_size=cfg.model.batch_size,
        num_workers=cfg.num_workers,
        progress=cfg.progress,
        bootstrap_seed=cfg.seed if bootstrap else None,
        max_molecules=cfg.get("max_molecules"),
        seed=cfg.seed,
    )


def build_model(cfg: DictConfig, dm: MoleculeDataModule) -> L.LightningModule:
    """The model, with input widths that depend on the data (`???` in its config) filled
    from the featurised training set, and the uq estimator's module arguments (a
    mean-variance likelihood, MC dropout) added to the model's own."""
    module_cfg = cfg.model.module
    backbone = module_cfg.get("backbone")
    if backbone is not None:
        with open_dict(backbone):
            for key, value in dm.features.dims().items():
                # `key in cfg` is False for a `???` value, hence the explicit key list
                if key in list(backbone.keys()) and OmegaConf.is_missing(backbone, key):
                    backbone[key] = value
    return instantiate(module_cfg, **uq_module_arguments(cfg))


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
        raise ValueError(
            f"uq={uq.name} sets {unknown} on the model, which {target.__name__} "
            f"(model={cfg.model.name}) does not take; use a neural model or another uq method"
        )
    return extra


class SaveRunConfig(L.Callback):
    """Stores the resolved run config in every checkpoint, so evaluate.py can rebuild the
    model and its data from the checkpoint alone, and the run's entry (configuration key,
    identity, budget overrides), so a resume can check it continues the same run (plain
    containers: loads weights-only)."""

    def __init__(self, cfg: DictConfig, run_entry: dict) -> None:
        self.config = OmegaConf.to_container(cfg, resolve=True)
        self.run_entry = run_entry

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        checkpoint[CONFIG_KEY] = self.config
        checkpoint[RUN_KEY] = self.run_entry
