"""A config read from a file the user may have received (the config stored in a
checkpoint, a saved benchmark task, a fine-tuned run's record) is data, never code, and
it never describes the installation.

Such a config is rebuilt from the project's own config tree (`rebuild`): the groups it
names (task, split, model and its nested groups, uq method, protocol, conformers) are
composed by name, as train.py composes them, and the file's values are taken only as
overrides of settings that exist there, of the same type and within their range
(`oodmol.overrides.SETTINGS`; names pass `oodmol.names.check_name`). Anything else is
refused, naming the key. Never taken from the file:
- where things live: a setting the tree derives from `paths`, Hydra's run folder or the
  environment keeps this installation's value;
- a data source's files (`task.source`): they are this installation's (its configs,
  OODMOL_SOURCE_DIR, the data folder); a file whose description differs is refused;
- looser molecule limits: a stored limit may only be stricter than the installation's.

Before any of that, the file's config is checked whole (`check_stored_config`): plain
values only, every `_target_` one that the tree names, no interpolation (`${...}` calls
resolvers), no key of Hydra's instantiation protocol the project does not write, and no
size or depth beyond what oodmol writes. Nothing is imported or built before the check.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from oodmol.bounded import check_shape
from oodmol.config import compose_config
from oodmol.config_tree import TARGET, buildable_targets, name_pattern, nested_groups, options
from oodmol.config_tree import target_node as tree_node
from oodmol.errors import UserError
from oodmol.names import UnsafeNameError, check_name
from oodmol.overrides import OverrideError, check_settings

# keys of Hydra's instantiation protocol beside _target_; any other key that starts with
# an underscore is not part of a config the project writes
INSTANTIATION_KEYS = frozenset({"_partial_", "_recursive_", "_convert_", "_args_"})
SCALARS = (str, int, float, bool, type(None))
# the groups a stored config names, composed by name (in this order)
GROUPS = ("task", "split", "model", "uq", "protocol", "conformers", "baseline")
# interpolations that say where things live: their values are this installation's
LOCATIONS = ("paths.", "hydra:", "oc.env:")
SOURCE = "task.source"
LIMITS = ("task.limits", "task.source.limits")
# the most a stored config holds: oodmol's hold a few hundred values, 6 levels deep
MAX_DEPTH, MAX_VALUES, MAX_TEXT, MAX_LIST = 24, 20_000, 10_000, 10_000
MAX_NUMBER = 1e15
# settings whose values are one of a few words (torch's, Lightning's)
CHOICES = {
    "matmul_precision": ("highest", "high", "medium"),
    "trainer.precision": ("64-true", "32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true"),
    "trainer.accelerator": ("cpu", "gpu", "cuda", "mps", "auto"),
}
# modules that moved, by their earlier names: a checkpoint written before a move names its
# classes at the old place, which is rewritten (as data) to the new one before the check
MOVED_MODULES = {
    "oodmol.models.likelihood": "oodmol.uq.likelihood",
    "oodmol.models.sklearn": "oodmol.models.fitted.forest",
    "oodmol.models.training_mean": "oodmol.models.fitted.training_mean",
    "oodmol.models.kernel_regression": "oodmol.models.fitted.kernel_regression",
    "oodmol.models.rt": "oodmol.models.rt.regression_transformer",
    "oodmol.models.rt_pretraining": "oodmol.models.rt.pretraining",
}


class UntrustedConfigError(UserError):
    """A stored config that the project would not have written: refused unbuilt."""


class NonStringKey:
    """Stands for a mapping key that is not a string while a config is checked."""

    def __init__(self, key: object) -> None:
        self.key = key

    def __repr__(self) -> str:
        return f"non-string key {self.key!r}"


def check_stored_config(config: Any, source: str) -> None:
    """Refuse a stored config that holds anything but plain values, targets the config
    tree names, and Hydra's instantiation keys; `source` names the file in the message."""
    check_shape(config, source, "stored config", MAX_DEPTH, MAX_VALUES, MAX_TEXT)
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
    check_shape(data, source, "checkpoint")
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


def rebuild(
    config: Any, source: str, keep: tuple[str, ...], config_name: str = "train"
) -> DictConfig:
    """`config_name` composed from the project's tree with the groups `config` names,
    and the values of its top-level keys `keep` taken as overrides (the module's rules);
    the rest of the file is not read. Refusals name `source` and the key."""
    if not isinstance(config, Mapping):
        raise UntrustedConfigError(
            f"{source}: the stored config is a {type(config).__name__}, not a mapping"
        )
    stored = {key: config[key] for key in keep if key in config}
    check_shape(stored, source, "stored config", MAX_DEPTH, MAX_VALUES, MAX_TEXT)
    stored = _moved(stored)
    check_stored_config(stored, source)
    choices = [c for group in GROUPS if group in stored for c in _choice(group, stored, source)]
    composed = compose_config(config_name, choices)
    OmegaConf.set_struct(composed, False)  # a key the configs lack is refused by name
    for key, value in stored.items():
        if composed._get_node(key) is None:
            raise UntrustedConfigError(
                f"{source}: {key} is not a setting of this installation's {config_name} config"
            )
        Overrides(source).put(composed, key, value, key)
    try:
        check_settings(composed, f" (stored in {source})")
    except OverrideError as error:
        raise UntrustedConfigError(str(error)) from None
    return composed


def _choice(group: str, stored: Mapping, source: str) -> list[str]:
    """The overrides that compose `group` (and the groups it nests) as the stored node
    was composed: the option it names, or whose name template its name fits, or the only
    option building its `_target_`."""
    node = stored[group]
    if not isinstance(node, Mapping):
        raise UntrustedConfigError(f"{source}: {group} holds a {type(node).__name__}")
    found = options(group)
    name = node.get("name")
    if name is not None:
        try:
            check_name(name, f"{group}.name")
        except UnsafeNameError as error:
            raise UntrustedConfigError(f"{source}: {error}") from None
    matches = [name] if name in found else []
    if not matches:
        matches = [
            option
            for option, settings in found.items()
            if (pattern := name_pattern(settings.get("name"))) and pattern.fullmatch(str(name))
        ]
    if len(matches) != 1 and isinstance(node.get(TARGET), str):
        matches = [o for o, settings in found.items() if settings.get(TARGET) == node[TARGET]]
    if len(matches) != 1:
        raise UntrustedConfigError(
            f"{source}: its {group} {str(name)[:80]!r} is none of this installation's "
            f"{group} configs ({', '.join(sorted(found))}); it cannot be rebuilt here"
        )
    overrides = [f"{group}={matches[0]}"]
    for nested in nested_groups(group, matches[0]):
        if isinstance(node.get(nested), Mapping):
            inner = f"{group}/{nested}"
            overrides += _choice(inner, {inner: node[nested]}, source)
    return overrides


class Overrides:
    """Puts the stored values onto the composed config, one setting at a time, by the
    module's rules; `source` names the file in refusals."""

    def __init__(self, source: str) -> None:
        self.source = source

    def refuse(self, key: str, why: str) -> UntrustedConfigError:
        return UntrustedConfigError(f"{self.source}: {key} {why}; this file is not used")

    def put(self, parent: DictConfig, name: str, value: Any, key: str) -> None:
        """Set `parent[name]` (the setting `key`) from the stored `value`."""
        node = parent._get_node(name)
        if key in LIMITS:
            self._limits(parent, name, value, key)
        elif key == SOURCE or key.startswith(f"{SOURCE}."):
            if isinstance(value, Mapping) and isinstance(node, DictConfig):
                for inner, item in value.items():
                    self._child(parent[name], inner, item, key)
            else:
                self._same_as_installed(parent, name, value, key)
        elif OmegaConf.is_interpolation(parent, name):
            # a value the configs derive: where things live stays this installation's; a
            # derived node (`featurizer: ${model.representation.featurizer}`) follows the
            # settings it is derived from; a derived value (a precision) may be set
            # (`baseline.column`: the task's estimate, or the list of estimates a run set)
            located = any(marker in str(node._value()) for marker in LOCATIONS)
            if located or isinstance(value, Mapping):
                return
            if isinstance(value, list | tuple):
                parent[name] = self._list(value, None, key)
            else:
                parent[name] = self._scalar(value, None, key)
        elif isinstance(value, Mapping):
            self._mapping(parent, name, value, key)
        elif isinstance(value, list | tuple):
            parent[name] = self._list(value, node, key)
        else:
            current = None if OmegaConf.is_missing(parent, name) else _plain(node)
            parent[name] = self._scalar(value, current, key)

    def _child(self, node: DictConfig, name: str, value: Any, key: str) -> None:
        where = f"{key}.{name}"
        if node._get_node(name) is None:  # (`in` is False for a value still ???)
            raise self.refuse(where, "is not a setting of this installation's configs")
        self.put(node, name, value, where)

    def _mapping(self, parent: DictConfig, name: str, value: Mapping, key: str) -> None:
        node = parent._get_node(name)
        target = value.get(TARGET)
        installed = node.get(TARGET) if isinstance(node, DictConfig) else None
        if target is not None and target != installed:
            base = tree_node(target)  # the settings a node building `target` has
            if base is None:
                raise self.refuse(key, f"names {target!r}, which the configs never build")
            parent[name] = OmegaConf.create(dict(base))
        elif not isinstance(node, DictConfig):
            raise self.refuse(key, f"holds settings where the configs hold {_kind(_plain(node))}")
        for inner, item in value.items():
            self._child(parent[name], inner, item, key)

    def _list(self, value: list | tuple, node: Any, key: str) -> list:
        if not isinstance(node, ListConfig) and _plain(node) is not None:
            raise self.refuse(key, f"holds a list where the configs hold {_kind(_plain(node))}")
        if len(value) > MAX_LIST:
            raise self.refuse(key, f"holds {len(value):,} values, more than any config's list")
        installed = _plain(node) or []
        if any(isinstance(item, Mapping | list) for item in value):
            if list(value) != installed:
                raise self.refuse(key, "holds a list of settings unlike the configs'")
            return list(value)
        model = installed[0] if installed and not isinstance(installed[0], Mapping) else None
        return [self._scalar(item, model, f"{key}[{i}]") for i, item in enumerate(value)]

    def _scalar(self, value: Any, current: Any, key: str) -> Any:
        if isinstance(value, Mapping | list | tuple):
            raise self.refuse(key, f"holds {_kind(value)} where the configs hold a value")
        if value is not None and current is not None and not _same_type(value, current):
            raise self.refuse(key, f"is {_kind(value)}; the configs hold {_kind(current)} here")
        if _number(value) and (not math.isfinite(value) or abs(value) > MAX_NUMBER):
            raise self.refuse(key, f"is {value!r}, out of any setting's range")
        allowed = CHOICES.get(key)
        if allowed is not None and value not in allowed:
            raise self.refuse(key, f"is {value!r}; it must be one of {', '.join(allowed)}")
        if key.rpartition(".")[2] == "name" and value is not None:
            try:
                check_name(value, key)
            except UnsafeNameError as error:
                raise UntrustedConfigError(f"{self.source}: {error}") from None
        return value

    def _same_as_installed(self, parent: DictConfig, name: str, value: Any, key: str) -> None:
        if _plain(parent._get_node(name)) != value:
            raise self.refuse(
                key,
                "differs from this installation's data source: where a data set's files "
                "are and what they hold is the installation's (configs/source/, "
                "OODMOL_SOURCE_DIR), never a received file's",
            )

    def _limits(self, parent: DictConfig, name: str, value: Any, key: str) -> None:
        """A stored molecule limit may only be stricter than the installation's."""
        node = parent._get_node(name)
        if not isinstance(value, Mapping) or not isinstance(node, DictConfig):
            raise self.refuse(key, "holds something other than the molecule limits")
        installed = _plain(node)
        for limit, stored in value.items():
            where = f"{key}.{limit}"
            if limit not in installed:
                raise self.refuse(where, "is not a molecule limit of this installation")
            own = installed[limit]
            if stored is None and own is None:
                continue
            if stored is None:
                raise self.refuse(where, f"is null (none), looser than this installation's {own}")
            if not _number(stored):
                raise self.refuse(where, f"is {_kind(stored)}, not a number")
            if own is not None and stored > own:
                raise self.refuse(where, f"is {stored}, looser than this installation's {own}")
            if stored <= 0:
                raise self.refuse(where, f"is {stored}; a limit must be positive")
            node[limit] = stored


def _plain(node: Any) -> Any:
    """A composed node's value as plain data, interpolations resolved in its config."""
    if isinstance(node, DictConfig | ListConfig):
        return OmegaConf.to_container(node, resolve=True)
    return node._value() if node is not None and hasattr(node, "_value") else node


def _same_type(value: Any, current: Any) -> bool:
    if isinstance(current, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(current, bool)
    if isinstance(current, float):
        return _number(value)
    return isinstance(value, type(current))


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _kind(value: Any) -> str:
    if isinstance(value, Mapping | DictConfig):
        return "settings"
    if isinstance(value, list | tuple | ListConfig):
        return "a list"
    return f"a {type(value).__name__}" if value is not None else "null"


def _moved(node: Any) -> Any:
    """A copy of `node` with the earlier names of moved targets replaced."""
    if isinstance(node, Mapping):
        return {
            k: _moved_target(v) if k == TARGET and isinstance(v, str) else _moved(v)
            for k, v in node.items()
        }
    if isinstance(node, list | tuple):
        return [_moved(v) for v in node]
    return node


def _moved_target(target: str) -> str:
    """`target` at its module's present place."""
    module, _, name = target.rpartition(".")
    return f"{MOVED_MODULES[module]}.{name}" if module in MOVED_MODULES else target


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
