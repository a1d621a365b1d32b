"""Starting a run from another run's weights and keeping parts of them fixed:

    python train.py task=qm9_gap model=chemprop model.init_from=<run>/checkpoints/best.ckpt \
        model.freeze=[message_passing]

`model.init_from` loads, from a checkpoint written by train.py (weights-only), every
tensor whose name and shape this model has; the rest keeps its fresh initialisation and
is reported with the reason (not in this model, another shape, the source run's target
scaling). The source may be another task: its target mean and standard deviation are
never taken, this run fits its own. `model.freeze` lists parameter-name prefixes, or
names of parts a model config declares (`model.parts`, e.g. Chemprop's
`message_passing`); frozen parameters join no optimiser group and get no gradient
(`oodmol.models.optim`). Both go into metrics.json (`transfer`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from pathlib import Path

import torch
from torch import nn

from oodmol.errors import UserError
from oodmol.identity import file_checksum
from oodmol.models.optim import check_prefixes, under_prefix
from oodmol.training.build import CONFIG_KEY, RUN_KEY

log = logging.getLogger(__name__)
# a Regressor's own target statistics: refit on every run's training set
TARGET_SCALING = ("y_mean", "y_std")


class TransferError(UserError, ValueError):
    """init_from or freeze cannot be applied to this model."""


def read_checkpoint(path: Path) -> dict:
    """A checkpoint written by train.py, loaded weights-only (it can run no code)."""
    if not path.is_file():
        raise TransferError(f"model.init_from={path}: no such file")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # truncated, not a checkpoint, or holding code
        raise TransferError(
            f"model.init_from={path} cannot be read as a checkpoint ({type(error).__name__})"
        ) from error
    if "state_dict" not in checkpoint or CONFIG_KEY not in checkpoint:
        raise TransferError(f"model.init_from={path} was not written by train.py")
    return checkpoint


def load_matching(model: nn.Module, state: Mapping[str, torch.Tensor]) -> dict:
    """Copy every tensor of `state` whose name and shape `model` has; how many were
    loaded, the others by why they were skipped, and this model's tensors that kept their
    fresh initialisation (JSON-ready)."""
    own = model.state_dict()
    loaded, skipped = [], {}
    for name, tensor in state.items():
        if name in TARGET_SCALING:
            reason = "target scaling of the source run (refit on this run's training set)"
        elif name not in own:
            reason = "not in this model"
        elif own[name].shape != tensor.shape:
            reason = "another shape here"
        else:
            own[name] = tensor.to(own[name].dtype)
            loaded.append(name)
            continue
        skipped.setdefault(reason, []).append(name)
    model.load_state_dict(own)
    fresh = sorted(set(own) - set(loaded) - set(TARGET_SCALING))
    return {
        "loaded": len(loaded),
        "skipped": {reason: sorted(names) for reason, names in skipped.items()},
        "kept_fresh": fresh,
    }


def freeze_prefixes(model: nn.Module, names: Iterable[str], parts: Mapping) -> list[str]:
    """Parameter-name prefixes of `names`, where a name may be a declared part; a name
    that matches no parameter is an error (a typo must not silently train it all)."""
    prefixes = []
    for name in names:
        prefixes += list(parts[name]) if name in parts else [name]
    try:
        check_prefixes(model, prefixes)
    except ValueError as error:
        raise TransferError(
            f"model.freeze={list(names)}: {error}; parts this model declares: {sorted(parts)}"
        ) from None
    return prefixes


def apply_transfer(
    model: nn.Module,
    init_from: str | None,
    freeze: Iterable[str] = (),
    parts: Mapping | None = None,
    task_config: dict | None = None,
) -> dict | None:
    """Load `init_from` into `model` and freeze `freeze` (through the model's optimiser
    `parameter_groups`); the record for metrics.json, None when neither is asked for.
    The source's and this run's task configs go into it, so that an analysis can relate
    the two properties (`oodmol ablation transfer`)."""
    freeze = list(freeze or [])
    if init_from is None and not freeze:
        return None
    if not hasattr(model, "parameter_groups"):
        raise TransferError(
            f"model.init_from/model.freeze need a neural model whose optimiser takes "
            f"parameter groups; {type(model).__name__} has none"
        )
    record: dict = {"init_from": None, "task_config": task_config}
    if init_from is not None:
        path = Path(init_from).expanduser()
        checkpoint = read_checkpoint(path)
        source = checkpoint[CONFIG_KEY]
        record["init_from"] = {
            "path": str(path),
            "checksum": file_checksum(str(path)),
            "task": source["task"]["name"],
            "task_config": source["task"],
            "model": source["model"]["name"],
            "config_key": checkpoint.get(RUN_KEY, {}).get("config_key"),
            "epoch": checkpoint.get("epoch"),
            **load_matching(model, checkpoint["state_dict"]),
        }
    prefixes = freeze_prefixes(model, freeze, parts or {})
    groups = dict(model.parameter_groups or {})
    groups["freeze"] = [*groups.get("freeze", []), *prefixes]
    model.parameter_groups = groups
    frozen = [p for n, p in model.named_parameters() if under_prefix(n, groups["freeze"])]
    record["freeze"] = freeze
    record["frozen_tensors"] = len(frozen)
    record["frozen_values"] = int(sum(p.numel() for p in frozen))
    record["trainable_values"] = int(sum(p.numel() for p in model.parameters())) - int(
        record["frozen_values"]
    )
    start = record["init_from"]
    log.info(
        "transfer: %s; frozen %d tensors (%d values), %d values trained",
        "no init_from"
        if start is None
        else f"{start['loaded']} tensors from {start['path']} ({start['task']}), skipped "
        + (", ".join(f"{len(v)} ({k})" for k, v in start["skipped"].items()) or "none"),
        record["frozen_tensors"],
        record["frozen_values"],
        record["trainable_values"],
    )
    return record
