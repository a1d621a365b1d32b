"""Where the Hydra config tree lives, and composing it outside `@hydra.main`."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import omegaconf._utils
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.initialize import get_gh_backup, restore_gh_from_backup
from omegaconf import DictConfig, OmegaConf
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

# the resolvers the config tree uses (${oodmol.config_key:}, ${oodmol.sha256:...},
# ${oodmol.member_dir:...}) are registered when this module is imported
import oodmol.identity  # noqa: F401

CONFIG_DIR_ENV = "OODMOL_CONFIG_DIR"
# libyaml's parser where PyYAML has it (its wheels do): the same documents as the pure
# Python one, eight times faster, and a command reads the whole tree to check a stored config
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def yaml_documents(path: Path) -> Iterator[Any]:
    """The documents of a YAML file of the config tree, as plain data (safe loading)."""
    return yaml.load_all(path.read_text(encoding="utf-8"), Loader=_YAML_LOADER)


def yaml_document(path: Path) -> Any:
    """The one document of a YAML file of the config tree ({} where it is empty)."""
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_YAML_LOADER) or {}


# OmegaConf's own loader: its rules for floats and timestamps, its refusal of duplicate keys
OMEGACONF_PURE_PYTHON_LOADER = omegaconf._utils.get_yaml_loader()


def _omegaconf_rules_over_libyaml() -> type:
    """OmegaConf's loader with libyaml's parser in place of PyYAML's pure Python one: the
    same rules and documents, and Hydra reads every file of a composition through it
    (about thirty for train.yaml: 0.127 s a composition against 0.145, `bench.door_start`)."""

    class Loader(yaml.cyaml.CParser, OMEGACONF_PURE_PYTHON_LOADER):
        def __init__(self, stream: Any) -> None:
            yaml.cyaml.CParser.__init__(self, stream)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)

    return Loader


if yaml.__with_libyaml__:
    _LOADER = _omegaconf_rules_over_libyaml()
    omegaconf._utils.get_yaml_loader = lambda: _LOADER


def gpu_present() -> bool:
    """Whether this process can use a CUDA GPU. A machine without NVIDIA's device files is
    answered without importing torch (seconds), so that a command line is checked fast."""
    if not Path("/dev/nvidiactl").exists() and not os.environ.get("CUDA_VISIBLE_DEVICES"):
        return False
    import torch

    return torch.cuda.is_available()


# configs/trainer/auto.yaml chooses by ${oodmol.gpu:<with a GPU>,<without>}
OmegaConf.register_new_resolver(
    "oodmol.gpu", lambda on_gpu, otherwise: on_gpu if gpu_present() else otherwise, replace=True
)
# configs/experiment/boom*.yaml sweep `task: ${oodmol.tasks:boom}`, every task of BOOM
OmegaConf.register_new_resolver(
    "oodmol.tasks", lambda benchmark: ",".join(benchmark_tasks(benchmark)), replace=True
)


def config_dir() -> Path:
    """The repository's configs/ folder (OODMOL_CONFIG_DIR overrides it)."""
    override = os.environ.get(CONFIG_DIR_ENV)
    folder = Path(override) if override else Path(__file__).resolve().parents[2] / "configs"
    if not (folder / "train.yaml").is_file() and not (folder / "data.yaml").is_file():
        raise FileNotFoundError(
            f"no oodmol config tree at {folder}; run from a checkout or set {CONFIG_DIR_ENV}"
        )
    return folder


@functools.cache
def _task_labels(folder: Path) -> dict[str, dict]:
    labels = {}
    for path in sorted((folder / "task").glob("*.yaml")):
        task = yaml_document(path)
        sources = [d for d in task.get("defaults", []) if isinstance(d, dict)]
        source = next((v for d in sources for k, v in d.items() if "source" in k), None)
        labels[path.stem] = {"benchmark": task.get("benchmark"), "source": source}
    return labels


def benchmark_tasks(benchmark: str, source: str | None = None) -> list[str]:
    """The tasks whose YAML says they belong to `benchmark` (`benchmark: boom`), in name
    order, of one data source if given: what a benchmark's grids, exclusions and tables
    list, so that adding a task is one YAML."""
    labels = _task_labels(config_dir().resolve())
    return [
        name
        for name, label in labels.items()
        if label["benchmark"] == benchmark and source in (None, label["source"])
    ]


def compose_config(name: str, overrides: list[str]) -> DictConfig:
    """Compose configs/<name>.yaml with command-line style overrides; inside a running
    Hydra application with its search path (a user's `--config-dir` included, where their
    own models and tasks live), its own state put back afterwards."""
    if GlobalHydra.instance().is_initialized():
        backup = get_gh_backup()
        try:
            return compose(config_name=name, overrides=overrides)
        finally:
            restore_gh_from_backup(backup)
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        return compose(config_name=name, overrides=overrides)
