"""What makes two runs the same run: the configuration key that names a run's folder, and
the identity a checkpoint must share with the run that resumes from it.

The key hashes every setting that can change a run's result (the task and its data
checksum, the split, the model and its hyperparameters, the uq method, `max_molecules`,
the training budget, early stopping ...) and nothing about how or where it runs (paths,
loggers, threads, devices, progress bars). The seed and the ensemble member are left out:
they get folders of their own below the key, so the seeds of one configuration sit side by
side (`runs/<task>/<split>/<model>/<key>/<seed>`).
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from oodmol.errors import MissingFileError
from oodmol.io import file_digest
from oodmol.lines import DEFAULT_LINE

KEY_LENGTH = 8
MEMBERS_DIR = "members"  # an ensemble's members train in <run dir>/members/<k>
PLACEHOLDER = "<not part of the result>"
# top-level keys that say how a run executes, not what it computes
EXECUTION_KEYS = frozenset(
    {
        "hydra",
        "paths",
        "logger",
        "progress",
        "num_workers",
        "data_on_device",
        "keep_freed_memory",
        "memory_fraction",
        "memory_limit_mb",
        "threads",
        "ckpt_path",
        "resume",
        "train",
        "test",
        "optimized_metric",
        "test_trials",
        "seed",
    }
)
TRAINER_EXECUTION_KEYS = frozenset(
    {
        "accelerator",
        "devices",
        "num_nodes",
        "strategy",
        "sync_batchnorm",
        "deterministic",
        "enable_progress_bar",
        "log_every_n_steps",
        "default_root_dir",
        "plugins",
    }
)
# keys anywhere in the tree that hold a location or say how many threads do the work
# (a geometry optimiser's), never a setting that changes a result
LOCATION_KEYS = frozenset({"dirpath", "output_dir", "save_dir", "threads"})
# model settings every config has (configs/train.yaml) that change nothing at these
# values: left out of the key then, so runs made before they existed keep their folders
NEUTRAL_MODEL_SETTINGS = {"init_from": None, "freeze": []}
# the module's settings that change nothing at these values (a compiled backbone computes
# what the eager one does only within rounding, so it is part of the key when on)
NEUTRAL_MODULE_SETTINGS = {"compile_backbone": False}
# top-level settings that change nothing at these values (TF32 matmuls do change results)
NEUTRAL_RUN_SETTINGS = {
    "matmul_precision": "highest",
    "geometry_filter": None,
    "baseline": {"name": "none"},  # no Δ-learning
    "weighting": {"name": "none"},  # every training molecule counts the same
}
# top-level groups that act only through the settings that interpolate them (the
# conformers a 3D featuriser reads): resolved into those, then left out, so that a model
# that does not read them keeps its key whichever is chosen
SELECTION_KEYS = ("conformers",)
# featuriser settings that change nothing at these values (no second geometry stage: the
# ETKDG + MMFF conformers of the runs made before geometries could be chosen)
NEUTRAL_FEATURIZER_SETTINGS = {"optimizer": None}
# Δ-learning's least-squares line, the way every baseline was fitted before the fit could
# be chosen: left out at that value, so those runs keep their folders
NEUTRAL_BASELINE_SETTINGS = {"fit": DEFAULT_LINE}
# split settings every split config has that change nothing at these values (the test
# sets never change; split.val=tail and split.subset change the training set)
NEUTRAL_SPLIT_SETTINGS = {"val": "random", "subset": None}
# model settings that only name things (model.parts: names model.freeze may use) or
# say how `oodmol pretrain` trains the model (model.pretraining), not this run
NAMING_MODEL_SETTINGS = ("parts", "pretraining")
# task settings that only label the task (the benchmark whose grids list it)
NAMING_TASK_SETTINGS = ("benchmark",)
# callbacks that only observe a run
OBSERVER_CALLBACKS = frozenset({"test_evaluation", "ood_trajectory"})


def result_settings(cfg: DictConfig) -> dict[str, Any]:
    """The resolved settings that can change a run's result (see the module docstring).

    Excluded settings are replaced by a placeholder before interpolations are resolved,
    so that a kept setting that interpolates one (the forest's `seed: ${seed}`) is the
    same for every seed, and a location that does not exist yet (the run folder being
    named) is never resolved."""
    tree = copy.deepcopy(OmegaConf.to_container(cfg, resolve=False))
    excluded = [(tree, key) for key in EXECUTION_KEYS if key in tree]
    trainer, callbacks, uq = (tree.get(k) for k in ("trainer", "callbacks", "uq"))
    if isinstance(trainer, dict):
        excluded += [(trainer, k) for k in TRAINER_EXECUTION_KEYS if k in trainer]
    if isinstance(callbacks, dict):
        excluded += [(callbacks, k) for k, v in callbacks.items() if v is None]
        excluded += [(callbacks, k) for k in OBSERVER_CALLBACKS if k in callbacks]
    if isinstance(uq, dict):  # members share their run's configuration, however trained
        excluded += [(uq, k) for k in ("member", "parallel") if k in uq]
    excluded += _locations(tree)
    model = tree.get("model")
    if isinstance(model, dict):
        excluded += [(model, k) for k, v in NEUTRAL_MODEL_SETTINGS.items() if model.get(k) == v]
        excluded += [(model, k) for k in NAMING_MODEL_SETTINGS if k in model]
        excluded += _neutral(model.get("module"), NEUTRAL_MODULE_SETTINGS)
    task = tree.get("task")
    if isinstance(task, dict):
        excluded += [(task, k) for k in NAMING_TASK_SETTINGS if k in task]
    # compared resolved: trainer=auto sets matmul_precision by the machine's GPU
    excluded += [
        (tree, k) for k, v in NEUTRAL_RUN_SETTINGS.items() if k in tree and cfg.get(k) == v
    ]
    excluded += _neutral(tree.get("split"), NEUTRAL_SPLIT_SETTINGS)
    excluded += _neutral(tree.get("baseline"), NEUTRAL_BASELINE_SETTINGS)
    for parent, key in excluded:
        parent[key] = PLACEHOLDER
    resolved = OmegaConf.to_container(OmegaConf.create(tree), resolve=True)
    for key in SELECTION_KEYS:
        resolved.pop(key, None)
    featurizer = (resolved.get("model") or {}).get("featurizer")
    if isinstance(featurizer, dict):
        for key, value in NEUTRAL_FEATURIZER_SETTINGS.items():
            if key in featurizer and featurizer[key] == value:
                del featurizer[key]
    start = (resolved.get("model") or {}).get("init_from")
    if (
        isinstance(start, str) and start != PLACEHOLDER
    ):  # starting weights are identified by content, not location
        resolved["model"]["init_from"] = {"path": start, "checksum": file_checksum(start)}
    return _without_placeholders(resolved)


def _without_placeholders(tree: Any) -> Any:
    """The tree less the excluded settings, and less a file's `path` where its
    `checksum` beside it identifies the content (two copies of a CSV are one data set)."""
    if isinstance(tree, dict):
        located = "path" in tree and "checksum" in tree
        return {
            k: _without_placeholders(v)
            for k, v in tree.items()
            if v != PLACEHOLDER and not (located and k == "path")
        }
    if isinstance(tree, list):
        return [_without_placeholders(v) for v in tree]
    return tree


def config_key(cfg: DictConfig) -> str:
    """Short hash of `result_settings`: equal keys, equal configurations."""
    text = json.dumps(result_settings(cfg), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:KEY_LENGTH]


def run_identity(cfg: DictConfig) -> dict[str, Any]:
    """What a checkpoint and the run resuming from it must share: the task (and its data),
    the split, the model, the seed, the uq method and member, the molecule subset.
    Hyperparameters such as the epoch budget may differ (training on for longer)."""
    keys = ("task", "split", "model", "uq", "seed", "max_molecules", "baseline", "weighting")
    part = {k: _resolved(cfg, k) for k in keys}
    task, uq = part["task"] or {}, part["uq"] or {}
    if isinstance(part["split"], dict):
        for parent, key in _neutral(part["split"], NEUTRAL_SPLIT_SETTINGS):
            del parent[key]
    for parent, key in _neutral(part["baseline"], NEUTRAL_BASELINE_SETTINGS):
        del parent[key]
    return {
        "task": task.get("name"),
        "data": task.get("checksum") or task.get("source"),
        "split": part["split"],
        "model": (part["model"] or {}).get("name"),
        "seed": part["seed"],
        "uq": {"method": uq.get("name", "none"), "member": uq.get("member")},
        "max_molecules": part["max_molecules"],
        # Δ-learning's baseline and training weights, where a run has them (runs without
        # keep their identity)
        **{k: part[k] for k in ("baseline", "weighting") if (part[k] or {}).get("_target_")},
    }


def describe(identity: Mapping[str, Any]) -> str:
    """One line naming a run: task=… split=… model=… seed=… (and uq, subset)."""
    split = identity.get("split") or {}
    parts = [
        f"task={identity.get('task')}",
        f"split={split.get('name') if isinstance(split, dict) else split}",
        f"model={identity.get('model')}",
        f"seed={identity.get('seed')}",
    ]
    uq = identity.get("uq") or {}
    if uq.get("method", "none") != "none":
        member = "" if uq.get("member") is None else f" member {uq['member']}"
        parts.append(f"uq={uq['method']}{member}")
    if identity.get("max_molecules") is not None:
        parts.append(f"max_molecules={identity['max_molecules']}")
    return " ".join(parts)


def identity_differences(ours: Mapping[str, Any], theirs: Mapping[str, Any]) -> list[str]:
    """Names of the identity fields in which two runs differ."""
    return [name for name in ours if ours.get(name) != theirs.get(name)]


def _resolved(cfg: DictConfig, key: str) -> Any:
    """One top-level setting, resolved on its own (a run's location may not exist yet)."""
    value = cfg.get(key)
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def _neutral(section: Any, neutral: dict[str, Any]) -> list[tuple[dict, str]]:
    """(section, key) of every setting of `section` at its neutral value."""
    if not isinstance(section, dict):
        return []
    return [(section, k) for k, v in neutral.items() if k in section and section[k] == v]


def _locations(tree: Any) -> list[tuple[dict, str]]:
    """(parent, key) of every location setting in a nested tree."""
    if isinstance(tree, list):
        return [found for item in tree for found in _locations(item)]
    if not isinstance(tree, dict):
        return []
    here = [(tree, k) for k in tree if k in LOCATION_KEYS]
    return here + [found for v in tree.values() for found in _locations(v)]


def _config_key_resolver(*, _root_: DictConfig) -> str:
    return config_key(_root_)


def file_checksum(path: str) -> str:
    """`sha256:<hex>` of a file's content: a user's CSV task is identified by what the
    file holds, not by where it lies."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise MissingFileError(f"{path}: no such file")
    return f"sha256:{file_digest(file, 'sha256')}"


def _member_dir_resolver(member: int | None) -> str:
    return "" if member is None else f"/{MEMBERS_DIR}/{member}"


# configs/hydra/default.yaml names run folders with ${oodmol.config_key:} and puts a
# single ensemble member's run into <run dir>/members/<k> (${oodmol.member_dir:...});
# configs/task/csv.yaml records its file's content with ${oodmol.sha256:${.path}}
OmegaConf.register_new_resolver("oodmol.config_key", _config_key_resolver, replace=True)
OmegaConf.register_new_resolver("oodmol.member_dir", _member_dir_resolver, replace=True)
OmegaConf.register_new_resolver("oodmol.sha256", file_checksum, replace=True, use_cache=True)
