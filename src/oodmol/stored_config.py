"""A config read from a file the user may have received (the config stored in a
checkpoint, a run folder's record, a saved benchmark task) is data, never code.

Hydra's `instantiate` imports and calls whatever a `_target_` names, so a planted target
in a shared checkpoint would run on `oodmol predict` or `evaluate.py`. Before anything of
such a config is built, `rebuild` checks it whole: every `_target_` must be one that the
project's own config tree names (`configs/**/*.yaml` of the tree in use, so a model added
there is buildable), and no value may be an interpolation (`${...}` calls resolvers, which
read the environment and files). Anything else is refused, naming the key; nothing is
imported before the check.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from oodmol.config import config_dir
from oodmol.errors import UserError

TARGET = "_target_"
# keys of Hydra's instantiation protocol beside _target_; any other key that starts with
# an underscore is not part of a config the project writes
INSTANTIATION_KEYS = frozenset({"_partial_", "_recursive_", "_convert_", "_args_"})
SCALARS = (str, int, float, bool, type(None))
# classes that moved, by their earlier names: a checkpoint written before a move names
# the old place, which is rewritten (as data) to the new one before the check
MOVED_TARGETS = {
    f"oodmol.models.likelihood.{name}": f"oodmol.uq.likelihood.{name}"
    for name in ("AbsoluteErrorLikelihood", "GaussianLikelihood")
}


class UntrustedConfigError(UserError):
    """A stored config that the project would not have written: refused unbuilt."""


class NonStringKey:
    """Stands for a mapping key that is not a string while a config is checked."""

    def __init__(self, key: object) -> None:
        self.key = key

    def __repr__(self) -> str:
        return f"non-string key {self.key!r}"


@functools.cache
def _targets_of_tree(folder: Path) -> frozenset[str]:
    found: set[str] = set()
    for path in sorted(folder.rglob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            found.update(target for _, target in _targets(document, ""))
    return frozenset(found)


def buildable_targets() -> frozenset[str]:
    """Every `_target_` the config tree in use names: what the project itself builds.
    The tree is `configs/` (or OODMOL_CONFIG_DIR) and, inside a Hydra application, every
    other folder of configs it searches (`--config-dir`, `hydra.searchpath`): a model a
    user added there, with its YAML, is the user's own project."""
    folders = {config_dir().resolve(), *_searched_folders()}
    return frozenset().union(*(_targets_of_tree(folder) for folder in sorted(folders)))


def _searched_folders() -> list[Path]:
    if not HydraConfig.initialized():
        return []
    sources = HydraConfig.get().runtime.config_sources
    return [
        Path(source.path).resolve()
        for source in sources
        if source.schema == "file" and Path(source.path).is_dir()
    ]


def check_stored_config(config: Any, source: str) -> None:
    """Refuse a stored config that holds anything but plain values, targets the config
    tree names, and Hydra's instantiation keys; `source` names the file in the message."""
    allowed = buildable_targets()
    for key, value in _leaves(config, ""):
        if not isinstance(value, SCALARS):
            what = repr(value) if isinstance(value, NonStringKey) else f"a {type(value).__name__}"
            raise UntrustedConfigError(
                f"{source}: {key or 'the stored config'} holds {what}, not a plain value; "
                "this file was not written by oodmol and is not used"
            )
        name = key.rpartition(".")[2]
        if name.startswith("_") and name != TARGET and name not in INSTANTIATION_KEYS:
            raise UntrustedConfigError(
                f"{source}: {key} is not a setting oodmol writes; this file is not used"
            )
        if isinstance(value, str) and "${" in value:
            raise UntrustedConfigError(
                f"{source}: {key} holds an interpolation ({value[:80]!r}); a stored config "
                "holds resolved values only, so this file is not used"
            )
        if name == TARGET and value not in allowed:
            raise UntrustedConfigError(
                f"{source}: {key} names {str(value)[:120]!r}, which this project's configs "
                "never build; refusing to build anything from this file (a model of your "
                "own must have its YAML in the config tree: OODMOL_CONFIG_DIR)"
            )


def check_plain_data(data: Any, source: str) -> None:
    """Refuse stored values (training statistics, feature state) that Hydra would read
    as something to build when they are passed to `instantiate` beside a config: a key
    of its instantiation protocol, or an interpolation."""
    for key, value in _leaves(data, ""):
        name = key.rpartition(".")[2]
        if name == TARGET or name in INSTANTIATION_KEYS or isinstance(value, NonStringKey):
            raise UntrustedConfigError(
                f"{source}: {key} is not a value oodmol stores; this file is not used"
            )
        if isinstance(value, str) and "${" in value:
            raise UntrustedConfigError(
                f"{source}: {key} holds an interpolation ({value[:80]!r}); this file is not used"
            )


def rebuild(config: Any, source: str, keep: tuple[str, ...] | None = None) -> DictConfig:
    """The stored config as a DictConfig, after `check_stored_config`; `keep` limits it
    to the top-level keys its reader needs (the rest is not even checked)."""
    if not isinstance(config, Mapping):
        raise UntrustedConfigError(
            f"{source}: the stored config is a {type(config).__name__}, not a mapping"
        )
    if keep is not None:
        config = {k: v for k, v in config.items() if k in keep}
    config = _moved(config)
    check_stored_config(config, source)
    return OmegaConf.create(dict(config))


def _moved(node: Any) -> Any:
    """A copy of `node` with the earlier names of moved targets replaced."""
    if isinstance(node, Mapping):
        return {
            k: MOVED_TARGETS.get(v, v) if k == TARGET and isinstance(v, str) else _moved(v)
            for k, v in node.items()
        }
    if isinstance(node, list | tuple):
        return [_moved(v) for v in node]
    return node


def _leaves(node: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    if isinstance(node, Mapping):
        for key, value in node.items():
            if not isinstance(key, str):  # no config oodmol writes has one: refused
                yield f"{prefix}{key!r}", NonStringKey(key)
                continue
            yield from _leaves(value, f"{prefix}{key}.")
    elif isinstance(node, list | tuple):
        for index, value in enumerate(node):
            yield from _leaves(value, f"{prefix.rstrip('.')}[{index}].")
    else:
        yield prefix.rstrip("."), node


def _targets(node: Any, prefix: str) -> Iterator[tuple[str, str]]:
    for key, value in _leaves(node, prefix):
        if key.rpartition(".")[2] == TARGET and isinstance(value, str):
            yield key, value
