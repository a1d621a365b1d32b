"""Optimiser parameter groups: no weight decay where it only hurts (biases, normalisation
layers, embeddings), layer-wise learning rates, and parts of a model frozen for
fine-tuning. A model config says what it wants under `model.module.parameter_groups`:

    parameter_groups:
      no_weight_decay: [biases, norms]        # biases, norms, embeddings
      lr_scale: {backbone.embedding: 0.1}     # a module path prefix -> learning-rate factor
      freeze: [backbone.encoder]              # module path prefixes not trained at all

A parameter takes the factor of the longest prefix it matches (1 where none does).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from functools import partial

import torch
from torch import nn

NORMS = (
    nn.LayerNorm,
    nn.GroupNorm,
    nn.RMSNorm,
    nn.modules.batchnorm._BatchNorm,
    nn.modules.instancenorm._InstanceNorm,
)
EXEMPTIONS = {
    "biases": lambda module, name: name == "bias",
    "norms": lambda module, name: isinstance(module, NORMS),
    "embeddings": lambda module, name: isinstance(module, nn.Embedding),
}


def parameter_groups(
    model: nn.Module,
    base_lr: float | None,
    no_weight_decay: Iterable[str] = (),
    lr_scale: Mapping[str, float] | None = None,
    freeze: Iterable[str] = (),
) -> list[dict]:
    """The model's trainable parameters in optimiser groups, one per (weight decay,
    learning-rate factor); frozen parameters stop requiring gradients and join none.

    `base_lr` is the optimiser's own learning rate (a group with factor f gets f times
    it); None is allowed where no factor differs from 1."""
    unknown = sorted(set(no_weight_decay) - set(EXEMPTIONS))
    if unknown:
        raise ValueError(f"no_weight_decay: unknown {unknown}; known: {sorted(EXEMPTIONS)}")
    scales = dict(lr_scale or {})
    frozen = tuple(freeze)
    check_prefixes(model, [*scales, *frozen])
    groups: dict[tuple[bool, float], list[nn.Parameter]] = {}
    for module_name, module in model.named_modules():
        for name, parameter in module.named_parameters(recurse=False):
            path = f"{module_name}.{name}" if module_name else name
            if under_prefix(path, frozen):
                parameter.requires_grad_(False)
                continue
            exempt = any(EXEMPTIONS[kind](module, name) for kind in no_weight_decay)
            groups.setdefault((exempt, _scale(path, scales)), []).append(parameter)
    if any(scale != 1.0 for _, scale in groups) and base_lr is None:
        raise ValueError("lr_scale needs the optimiser's lr in its config")
    result = []
    for (exempt, scale), parameters in groups.items():
        group: dict = {"params": parameters}
        if exempt:
            group["weight_decay"] = 0.0
        if scale != 1.0:
            group["lr"] = base_lr * scale
        result.append(group)
    return result


def build_optimizer(
    factory: Callable[..., torch.optim.Optimizer], model: nn.Module, settings: Mapping | None
) -> torch.optim.Optimizer:
    """`factory` (a config's `_partial_` optimiser) on the model's parameter groups."""
    if not settings:
        return factory(model.parameters())
    base_lr = factory.keywords.get("lr") if isinstance(factory, partial) else None
    return factory(parameter_groups(model, base_lr, **settings))


def under_prefix(path: str, prefixes: Iterable[str]) -> bool:
    return any(path == p or path.startswith(p + ".") for p in prefixes)


def _scale(path: str, scales: Mapping[str, float]) -> float:
    matching = [p for p in scales if under_prefix(path, [p])]
    return float(scales[max(matching, key=len)]) if matching else 1.0


def check_prefixes(model: nn.Module, prefixes: Iterable[str]) -> None:
    """Every prefix names a part of the model: a typo must not silently train it all."""
    paths = [name for name, _ in model.named_parameters()]
    missing = [p for p in prefixes if not any(under_prefix(path, [p]) for path in paths)]
    if missing:
        raise ValueError(f"no parameter of the model is under {missing}")
