"""Building a run's objects from its composed config, shared by train.py and evaluate.py."""

from __future__ import annotations

import lightning as L
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict

from oodmol.data.datamodule import MoleculeDataModule

CONFIG_KEY = "oodmol_config"


def build_datamodule(cfg: DictConfig) -> MoleculeDataModule:
    return MoleculeDataModule(
        task=instantiate(cfg.task),
        split=instantiate(cfg.split),
        featurizer=instantiate(cfg.model.featurizer),
        features=instantiate(cfg.model.features),
        data_dir=cfg.paths.data_dir,
        batch_size=cfg.model.batch_size,
        num_workers=cfg.num_workers,
        progress=cfg.progress,
    )


def build_model(cfg: DictConfig, dm: MoleculeDataModule) -> L.LightningModule:
    """The model, with input widths that depend on the data (`???` in its config) filled
    from the featurised training set."""
    module_cfg = cfg.model.module
    backbone = module_cfg.get("backbone")
    if backbone is not None:
        with open_dict(backbone):
            for key, value in dm.features.dims().items():
                # `key in cfg` is False for a `???` value, hence the explicit key list
                if key in list(backbone.keys()) and OmegaConf.is_missing(backbone, key):
                    backbone[key] = value
    return instantiate(module_cfg)


class SaveRunConfig(L.Callback):
    """Stores the resolved run config in every checkpoint, so evaluate.py can rebuild the
    model and its data from the checkpoint alone (plain containers: loads weights-only)."""

    def __init__(self, cfg: DictConfig) -> None:
        self.config = OmegaConf.to_container(cfg, resolve=True)

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        checkpoint[CONFIG_KEY] = self.config
