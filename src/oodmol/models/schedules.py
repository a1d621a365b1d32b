"""Learning-rate schedules that depend on the length of the run (steps per epoch, epochs).

A scheduler factory in a model config is a partial (`_partial_: true`) that
`PropertyRegressor` calls with the optimizer; one that also declares a `trainer`
parameter receives the Trainer, so it can read the run's length once the training data
is known, with no model-specific code in the module (`build_scheduler`).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable

import lightning as L
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR, LRScheduler, ReduceLROnPlateau


def build_scheduler(factory: Callable, optimizer: Optimizer, trainer: L.Trainer) -> LRScheduler:
    """`factory(optimizer)`, or `factory(optimizer, trainer=trainer)` for a factory that
    takes a `trainer`."""
    if "trainer" in inspect.signature(factory).parameters:
        return factory(optimizer, trainer=trainer)
    return factory(optimizer)


def steps_per_epoch(trainer: L.Trainer) -> int:
    """Optimizer steps in one training epoch (after `limit_train_batches` and gradient
    accumulation)."""
    trainer.estimated_stepping_batches  # noqa: B018 - loads the train loader to count it
    return max(1, math.ceil(trainer.num_training_batches / trainer.accumulate_grad_batches))


def noam_like(
    optimizer: Optimizer,
    trainer: L.Trainer,
    warmup_epochs: float = 2,
    init_lr: float = 1e-4,
    max_lr: float = 1e-3,
    final_lr: float = 1e-4,
) -> LambdaLR:
    """Chemprop's Noam-like schedule, stepped every batch: linear warm-up from `init_lr`
    to `max_lr` over `warmup_epochs`, then exponential decay that reaches `final_lr` at
    the end of `trainer.max_epochs` (and stays there).

    The rates are absolute: the optimizer's own `lr` is overridden.
    """
    if not trainer.max_epochs or trainer.max_epochs < 0:
        raise ValueError("noam_like needs a finite trainer.max_epochs to decay over")
    per_epoch = steps_per_epoch(trainer)
    warmup = round(warmup_epochs * per_epoch)
    cooldown = max(trainer.max_epochs * per_epoch - warmup, 0)
    for group in optimizer.param_groups:
        group["lr"] = init_lr  # LambdaLR scales this base rate

    def factor(step: int) -> float:
        return noam_like_lr(step, warmup, cooldown, init_lr, max_lr, final_lr) / init_lr

    return LambdaLR(optimizer, factor)


def noam_like_lr(
    step: int,
    warmup_steps: int,
    cooldown_steps: int,
    init_lr: float,
    max_lr: float,
    final_lr: float,
) -> float:
    """The learning rate at optimizer step `step` (0-based)."""
    if step < warmup_steps:
        return init_lr + (max_lr - init_lr) * step / warmup_steps
    if step < warmup_steps + cooldown_steps:
        return max_lr * (final_lr / max_lr) ** ((step - warmup_steps) / cooldown_steps)
    return final_lr


def warmup_plateau(
    optimizer: Optimizer,
    trainer: L.Trainer,
    warmup_steps: int = 10000,
    factor: float = 0.8,
    patience: int = 15,
    min_lr: float = 1e-7,
) -> ReduceLROnPlateau:
    """TorchMD-Net's and ViSNet's schedule: the rate rises linearly from 1/`warmup_steps`
    of the optimizer's `lr` to all of it over the first `warmup_steps` optimizer steps
    (it is set before each step from `trainer.global_step`, so a resumed run stays on
    it), and `ReduceLROnPlateau` on the validation loss (`scheduler_interval: epoch`)
    does the rest. As in their code, the warm-up overrides plateau decisions while on.
    """
    base = [group["lr"] for group in optimizer.param_groups]

    def warm_up(opt: Optimizer, args: tuple, kwargs: dict) -> None:
        if trainer.global_step < warmup_steps:
            scale = (trainer.global_step + 1) / warmup_steps
            for group, lr in zip(opt.param_groups, base, strict=True):
                group["lr"] = scale * lr

    optimizer.register_step_pre_hook(warm_up)
    return ReduceLROnPlateau(optimizer, mode="min", factor=factor, patience=patience, min_lr=min_lr)


def warmup_cosine(
    optimizer: Optimizer,
    trainer: L.Trainer,
    warmup_fraction: float = 0.1,
    min_lr: float = 0.0,
) -> LambdaLR:
    """Linear warm-up over the first `warmup_fraction` of all optimizer steps, then a
    cosine decay to `min_lr` at the last step (`scheduler_interval: step`), as BOOM's
    ModernBERT and most transformer recipes train. Rates are relative to each parameter
    group's own (so layer-wise factors hold); `min_lr` is absolute for the optimizer's
    largest rate."""
    if not trainer.max_epochs or trainer.max_epochs < 0:
        raise ValueError("warmup_cosine needs a finite trainer.max_epochs to decay over")
    total = trainer.max_epochs * steps_per_epoch(trainer)
    warmup = max(1, round(warmup_fraction * total))
    floor = min_lr / max(group["lr"] for group in optimizer.param_groups)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return LambdaLR(optimizer, factor)


def linear_decay(optimizer: Optimizer, trainer: L.Trainer, warmup_steps: int = 0) -> LambdaLR:
    """A linear warm-up over `warmup_steps`, then a linear decay to 0 at the last
    optimizer step (`scheduler_interval: step`): the Hugging Face Trainer's default
    schedule ("linear"), with which BOOM trained the Regression Transformer."""
    if not trainer.max_epochs or trainer.max_epochs < 0:
        raise ValueError("linear_decay needs a finite trainer.max_epochs to decay over")
    total = trainer.max_epochs * steps_per_epoch(trainer)

    def factor(step: int) -> float:
        if step < warmup_steps:
            return step / warmup_steps
        return max(0.0, (total - step) / max(1, total - warmup_steps))

    return LambdaLR(optimizer, factor)
