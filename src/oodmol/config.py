"""Where the Hydra config tree lives, and composing it outside `@hydra.main`."""

from __future__ import annotations

import os
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

# the resolvers the config tree uses (${oodmol.config_key:}, ${oodmol.sha256:...},
# ${oodmol.member_dir:...}) are registered when this module is imported
import oodmol.identity  # noqa: F401

CONFIG_DIR_ENV = "OODMOL_CONFIG_DIR"


def config_dir() -> Path:
    """The repository's configs/ folder (OODMOL_CONFIG_DIR overrides it)."""
    override = os.environ.get(CONFIG_DIR_ENV)
    folder = Path(override) if override else Path(__file__).resolve().parents[2] / "configs"
    if not (folder / "train.yaml").is_file() and not (folder / "data.yaml").is_file():
        raise FileNotFoundError(
            f"no oodmol config tree at {folder}; run from a checkout or set {CONFIG_DIR_ENV}"
        )
    return folder


def compose_config(name: str, overrides: list[str]) -> DictConfig:
    """Compose configs/<name>.yaml with command-line style overrides."""
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        return compose(config_name=name, overrides=overrides)
