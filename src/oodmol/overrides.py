"""Checking a command line's `key=value` overrides before any work starts, so that a typo
ends in one line that names the nearest valid key or choice, not in Hydra's traceback
after seconds of imports; and the settings whose values have a type and a range
(`seed=abc`, `threads=-2`, `max_molecules=0`) refused by name."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, OverrideType
from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import (
    InterpolationResolutionError,
    InterpolationToMissingValueError,
    MissingMandatoryValue,
    OmegaConfBaseException,
)

from oodmol.config import config_dir
from oodmol.credentials import refuse_secrets
from oodmol.errors import UserError, user_error_behind
from oodmol.names import UnsafeNameError, check_name

MAX_CHECKED_VALUES = 20  # of one sweep parameter, composed one at a time
_ABSENT = object()


class OverrideError(UserError, ValueError):
    """A command-line override that names no setting or choice, or gives a wrong value."""


@dataclass(frozen=True)
class Setting:
    """What a value of one setting must be: a whole number (`minimum` and up) or a
    boolean, maybe null."""

    kind: type
    minimum: int | None = None
    nullable: bool = False
    meaning: str = ""

    def accepts(self, value: Any) -> bool:
        if value is None:
            return self.nullable
        if self.kind is bool:
            return isinstance(value, bool)
        if isinstance(value, bool) or not isinstance(value, int):
            return False
        return self.minimum is None or value >= self.minimum

    def expected(self) -> str:
        if self.kind is bool:
            return "true or false"
        text = f"a whole number ≥ {self.minimum}" if self.minimum is not None else "a whole number"
        text += f" ({self.meaning})" if self.meaning else ""
        return f"{text}, or null" if self.nullable else text


# settings of the entry points' configs whose values are checked wherever they appear
SETTINGS: dict[str, Setting] = {
    "seed": Setting(int, 0, nullable=True, meaning="the random seed"),
    "threads": Setting(int, 1, nullable=True, meaning="cores and threads; null: all"),
    "max_molecules": Setting(int, 1, nullable=True, meaning="per set; null: every molecule"),
    "num_workers": Setting(int, 0, meaning="DataLoader worker processes"),
    "eval_batch_size": Setting(int, 1, meaning="molecules per evaluation batch"),
    "memory_limit_mb": Setting(
        int, 1, nullable=True, meaning="MB a run may take beyond its data and model; null: all free"
    ),
    "model.max_epochs": Setting(int, 1, meaning="a run trains at least one epoch"),
    "trainer.max_epochs": Setting(int, 1, meaning="a run trains at least one epoch"),
    "model.batch_size": Setting(int, 1, meaning="molecules per training batch"),
    "uq.parallel": Setting(int, 1, meaning="ensemble members trained at once"),
    "progress": Setting(bool),
    "resume": Setting(bool),
    "train": Setting(bool),
    "test": Setting(bool),
}


# settings that become folder names (the run folder, the data folder's caches)
NAMES = ("task.name", "split.name", "model.name", "uq.name", "conformers.name", "model_name")


def check_settings(cfg: DictConfig, where: str = "") -> None:
    """Refuse a value of a known setting that has the wrong type or range, and a name
    that could not be a folder's (`oodmol.names`), naming it."""
    for key in NAMES:
        try:
            value = OmegaConf.select(cfg, key, default=_ABSENT)
        except OmegaConfBaseException:
            continue
        if value is not _ABSENT and value is not None:
            try:
                check_name(value, key)
            except UnsafeNameError as error:
                raise OverrideError(f"{error}{where}") from None
    for key, setting in SETTINGS.items():
        try:
            value = OmegaConf.select(cfg, key, default=_ABSENT)
        except OmegaConfBaseException:  # an interpolation only a running app resolves
            continue
        if value is _ABSENT:
            continue
        if not setting.accepts(value):
            raise OverrideError(f"{key}={_shown(value)}{where}: {key} must be {setting.expected()}")


def check_resolvable(cfg: DictConfig, every_value: bool = True) -> None:
    """Resolve every setting a job will read (all but Hydra's own, which only a running
    job can): a required value not given, or a file a setting names that is not there,
    is refused by its key. Other interpolations are left to the job. `every_value=False`
    leaves values marked ??? to the tool, which knows which of them it needs."""
    for key in _leaf_keys(cfg):
        try:
            OmegaConf.select(cfg, key, throw_on_missing=every_value)
        except MissingMandatoryValue:
            raise OverrideError(
                f"{key}=... is required here; give it on the command line"
            ) from None
        except InterpolationResolutionError as error:
            cause = user_error_behind(error)
            if cause is not None:
                raise OverrideError(f"{key}: {cause}") from None
            if isinstance(error, InterpolationToMissingValueError):
                missing = str(error).splitlines()[0].rsplit(":", 1)[-1].strip()
                raise OverrideError(
                    f"{missing}=... is required here (for {key}); give it on the command line"
                ) from None


def _leaf_keys(node: DictConfig | ListConfig, prefix: str = "") -> Iterator[str]:
    """Full keys of every value below `node` but Hydra's own node."""
    items = node.items_ex(resolve=False) if isinstance(node, DictConfig) else enumerate(node)
    for key, _ in items:
        full = f"{prefix}{key}" if isinstance(node, DictConfig) else f"{prefix.rstrip('.')}[{key}]"
        if full == "hydra":
            continue
        child = node._get_node(key)
        if isinstance(child, DictConfig | ListConfig) and not child._is_interpolation():
            yield from _leaf_keys(child, f"{full}.")
        else:
            yield full


def check_overrides(config_name: str, overrides: Sequence[str]) -> DictConfig:
    """Compose `config_name` with the overrides of a command line, as Hydra will, and
    refuse what would fail there: an unknown key or choice (naming the nearest ones), an
    override that does not parse, a known setting's wrong value. A sweep's values are
    checked one at a time (at most `MAX_CHECKED_VALUES` per parameter). Returns the
    config of the sweep's first job (or the run's)."""
    parsed = _parse(overrides)
    first = [_first_value(o) for o in parsed]
    variants = [first]
    for index, override in enumerate(parsed):
        if override.is_sweep_override():
            for value in list(override.sweep_string_iterator())[1:MAX_CHECKED_VALUES]:
                variant = list(first)
                variant[index] = f"{override.get_key_element()}={value}"
                variants.append(variant)
    composed = None
    for variant in variants:
        cfg = _compose(config_name, variant)
        check_settings(cfg, _sweep_note(variant) if len(variants) > 1 else "")
        check_resolvable(cfg)
        composed = composed or cfg
    return composed


def deferred_to_jobs(overrides: Sequence[str]) -> dict[str, str]:
    """A multirun's single choices of nested config groups (`model/representation=soap`),
    each mapped to the one-value sweep that means the same (`model/representation=
    choice(soap)`). Hydra applies a sweep's single values to the primary config before it
    sweeps, and the primary config's model (the MLP) has no representation: only the
    jobs' models (`model=ridge,krr_rbf`) do. A sweep's values wait for the jobs."""
    deferred = {}
    for override in _parse(overrides):
        group = override.key_or_group
        if (
            override.is_sweep_override()
            or not (override.type == OverrideType.CHANGE and "/" in group)
            or group.startswith("hydra/")
            or not isinstance(override.value(), str)
        ):
            continue
        key = override.input_line.split("=", 1)[0]
        deferred[override.input_line] = f"{key}=choice({override.value()})"
    return deferred


def compose_checked(config_name: str, overrides: Sequence[str]) -> DictConfig:
    """The config a tool runs with (no Hydra output folder, no sweeps), after the same
    checks as `check_overrides`."""
    for override in _parse(overrides):
        if override.is_sweep_override():
            raise OverrideError(
                f"{override.input_line}: this command runs once; give one value, not a sweep"
            )
    cfg = _compose(config_name, list(overrides), hydra_node=False)
    check_settings(cfg)
    check_resolvable(cfg, every_value=False)
    return cfg


def _parse(overrides: Sequence[str]) -> list[Override]:
    refuse_secrets(overrides)  # first: no message below may show a key's value
    parser = OverridesParser.create()
    parsed = []
    for text in overrides:
        try:
            parsed += parser.parse_overrides([text])
        except OverrideParseException as error:
            reason = str(error).splitlines()[0]
            raise OverrideError(
                f"{text}: not a valid override ({reason}); write key=value, quote values "
                "with spaces or brackets ('key=[1,2]'), see "
                "https://hydra.cc/docs/advanced/override_grammar/basic/"
            ) from None
    return parsed


def _first_value(override: Override) -> str:
    if not override.is_sweep_override():
        return override.input_line
    return f"{override.get_key_element()}={next(iter(override.sweep_string_iterator()))}"


def _sweep_note(variant: Sequence[str]) -> str:
    return f" (in the sweep's job {' '.join(variant)})"


def _compose(config_name: str, overrides: list[str], hydra_node: bool = True) -> DictConfig:
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        try:
            return compose(config_name, overrides, return_hydra_config=hydra_node)
        except MissingConfigException as error:
            raise OverrideError(_unknown_choice(error, overrides)) from None
        except ConfigCompositionException as error:
            raise OverrideError(_unknown_key(error, config_name, overrides, hydra_node)) from None
        except OmegaConfBaseException as error:
            raise OverrideError(f"{' '.join(overrides)}: {_first_line(error)}") from None


def _unknown_choice(error: MissingConfigException, overrides: Sequence[str]) -> str:
    """`model=mlpp`: the group, the nearest choices and all of them."""
    missing = error.missing_cfg_file or ""
    group, _, name = missing.rpartition("/")
    options = sorted(error.options or [])
    if not group or not options:
        return f"{' '.join(overrides)}: {_first_line(error)}"
    key = group.removeprefix("hydra/") if group.startswith("hydra/") else group
    named = [o for o in overrides if o.lstrip("+~").split("=")[0] in (group, key)]
    return unknown_choice_message(named[-1] if named else name, group, name, options)


def unknown_choice_message(
    given: str, group: str, name: str, options: Sequence[str], folder: str | None = None
) -> str:
    """`model=mlpp: there is no model 'mlpp'; did you mean mlp? the choices are ...`,
    naming the choices' folder, configs/<folder or group>/."""
    near = difflib.get_close_matches(name, options, n=3, cutoff=0.5)
    hint = f"; did you mean {' or '.join(near)}?" if near else ";"
    return (
        f"{given}: there is no {group} {name!r}{hint} the choices are "
        f"{', '.join(options)} (configs/{folder or group}/*.yaml)"
    )


def _unknown_key(
    error: ConfigCompositionException,
    config_name: str,
    overrides: list[str],
    hydra_node: bool,
) -> str:
    """`trainer.max_epoch=3`: the nearest keys beside it, and how to add a new one."""
    full_key = getattr(error.__cause__, "full_key", None)
    culprit = next(
        (o for o in overrides if full_key and o.lstrip("+~").split("=")[0] == full_key), None
    )
    if not full_key or culprit is None:
        cause = f" ({_first_line(error.__cause__)})" if error.__cause__ else ""
        return f"{' '.join(overrides)}: {_first_line(error)}{cause}"
    parent_key, _, name = full_key.rpartition(".")
    others = [o for o in overrides if o is not culprit]
    try:  # the tree without the culprit, for the keys beside the one it names
        tree = compose(config_name, others, return_hydra_config=hydra_node)
        parent = OmegaConf.select(tree, parent_key) if parent_key else tree
    except (ConfigCompositionException, OmegaConfBaseException):
        parent = None
    keys = list(parent.keys()) if isinstance(parent, DictConfig) else []
    near = difflib.get_close_matches(name, [str(k) for k in keys], n=3, cutoff=0.6)
    where = f" in {parent_key}" if parent_key else ""
    prefix = f"{parent_key}." if parent_key else ""
    hint = f"; did you mean {' or '.join(prefix + n for n in near)}?" if near else ""
    return (
        f"{culprit}: there is no setting {name!r}{where}{hint} "
        f"(to add a new key on purpose, write +{culprit.lstrip('+')})"
    )


def _first_line(error: BaseException | None) -> str:
    return str(error).strip().splitlines()[0] if error is not None and str(error).strip() else ""


def _shown(value: Any) -> str:
    if isinstance(value, ListConfig | DictConfig):
        return str(OmegaConf.to_container(value))
    return str(value)


def names_of(value: object) -> list:
    """One name, a list of them, or names joined by commas (a sweep's list, such as
    `${oodmol.tasks:boom}`); `featurizers=morgan` means `[morgan]`, not 6 letters."""
    if isinstance(value, str):
        return [name.strip() for name in value.split(",") if name.strip()]
    return list(value) if isinstance(value, Iterable) else [value]


def tool_config(name: str, overrides: Sequence[str], required: Sequence[str] = ()) -> DictConfig:
    """A `key=value` tool's config (configs/<name>.yaml with `overrides`), checked as
    `compose_checked` does, with every `required` key given."""
    cfg = compose_checked(name, overrides)
    for key in required:
        if OmegaConf.is_missing(cfg, key):
            raise OverrideError(f"{key}=... is required (see configs/{name}.yaml)")
    return cfg
