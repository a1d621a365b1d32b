"""Batches that fit the machine a run is given.

On a CPU the kernel's out-of-memory killer ends a process without a word: no message, no
record, nothing to retry. So before training, a run measures what its model's steps
take on its largest molecules (`oodmol.training.memory_curve`, with the machine's own
count: `oodmol.training.memory_meter`), and

- sizes every training batch the sampler will draw, epoch by epoch as the loader draws
  them, and refuses to start, saying how much memory its largest training step would
  need and which batch size would fit, when that step does not fit;
- evaluates in batches no larger than fit in its share of the memory available
  (`eval_batch_size` is then an upper bound), sized as if every molecule were as large
  as the largest one evaluated;
- and where a GPU runs out of memory all the same while evaluating (another process took
  some meanwhile), halves the evaluation batch and evaluates again (`halving_on_oom`).

`memory_fraction` is the share of the available memory a run plans for: what the
machine's other work may take meanwhile. `memory_limit_mb` replaces what is available
(a share of a node, or a test).
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import lightning as L
import numpy as np
import torch
from torch.utils.data import Dataset

from oodmol.errors import InputError, UserError
from oodmol.training.memory_curve import ENDS, LARGEST, MB, BatchCost, measure_cost
from oodmol.training.memory_meter import (
    available_bytes,
    can_measure,
    collecting_only_new_objects,
    measured,
)

log = logging.getLogger(__name__)
T = TypeVar("T")
# Adam's two moments stay beside every step, and its update makes about two more
# copies of the weights while it runs (the gradients are measured with the step)
OPTIMIZER_COPIES = 4
KEPT_BY_OPTIMIZER = 2  # beside evaluation during training: the two moments
MOST_DRAWN = 2_000_000  # molecules drawn at most in sizing: bounds the sizing's time
# a training probe runs its step this many times, measured together: where the allocator
# puts a step's tensors hangs on where the steps before put theirs, and a run's heap holds
# the worst of many steps (one GeoFormer step on the same batch, measured alone, varied by
# a fifth from one measurement to the next; bench/memory_planner.py). An evaluation step
# keeps nothing for the next and is measured once.
PROBE_STEPS = 3


class BatchTooLarge(UserError):
    """A training batch that cannot fit the memory this run has."""


@dataclass(frozen=True)
class TrainingBatches:
    """What a run trains on: its dataset, batch size, and the order in which its loader
    draws the molecules each epoch for a given batch size (`MoleculeDataModule.
    training_orders`)."""

    dataset: Dataset
    batch_size: int
    orders: Callable[[int], Iterable[np.ndarray]]


@dataclass(frozen=True)
class MemoryPlan:
    """What a run measured and chose, in MB: its budget, the largest training step of
    the batches it sized (with the optimiser's state) and the evaluation batch."""

    available_mb: float
    budget_mb: float
    weights_mb: float
    train_batch: int | None
    train_need_mb: float | None
    train_batches_sized: int | None
    train_cost: dict | None
    eval_batch_requested: int
    eval_batch: int
    eval_need_mb: float
    eval_cost: dict

    def facts(self) -> dict:
        return {
            k: round(v, 1) if isinstance(v, float) else v
            for k, v in self.__dict__.items()
            if v is not None
        }


def plan_memory(
    model: L.LightningModule,
    collate: Callable,
    device: torch.device,
    evaluated: Sequence[Dataset],
    eval_batch_size: int,
    fraction: float,
    limit_mb: float | None = None,
    processes: int = 1,
    training: TrainingBatches | None = None,
) -> MemoryPlan | None:
    """Measure the model on the largest molecules of the sets it trains on and
    `evaluated`, and choose the evaluation batch; with `training`, `BatchTooLarge` when
    its largest training step cannot fit. None for a model without trained parameters
    (the forest), whose memory is its own affair, or where memory cannot be measured."""
    if not any(p.requires_grad for p in model.parameters()):
        return None
    fraction = _checked_fraction(fraction)
    if not can_measure(device):
        log.warning("memory is not planned: this system cannot measure a process's peak")
        return None
    model = model.to(device)
    log.info("measuring the model's memory on its largest molecules")
    available = available_bytes(device, limit_mb)
    budget = available * fraction / processes  # also what a probe may take
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    train_cost, train = None, None
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        if training:
            train_cost = step_cost(model, training.dataset, collate, device, training, budget)
            train = _fit_training(
                training, train_cost, budget, weights, available, fraction, processes
            )
        evaluation = max((d for d in evaluated if len(d)), key=_largest_size)
        eval_cost = step_cost(model, evaluation, collate, device, eval_batch_size, budget)
    kept = KEPT_BY_OPTIMIZER * weights if training else 0
    eval_batch = max(1, min(eval_batch_size, eval_cost.most_molecules(budget - kept)))
    eval_need = kept + eval_cost.bound(eval_batch)
    return MemoryPlan(
        available / MB,
        budget / MB,
        weights / MB,
        training.batch_size if training else None,
        train[0] / MB if train else None,
        train[1] if train else None,
        train_cost.facts() if train_cost else None,
        eval_batch_size,
        eval_batch,
        eval_need / MB,
        eval_cost.facts(),
    )


def halving_on_oom(evaluate: Callable[[int], T], batch_size: int) -> T:
    """What `evaluate(batch_size)` returns, run again with half the batch each time the
    device runs out of memory, down to one molecule; said once in the log where the
    batch that ran is not the one asked for. An evaluation keeps nothing of a failed
    pass, so running it again loses nothing."""
    size = batch_size
    while True:
        try:
            result = evaluate(size)
            break
        except torch.OutOfMemoryError:
            if size == 1:
                raise
        size = max(1, size // 2)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()  # what the failed pass held goes back to the device
    if size < batch_size:
        log.warning(
            "the device ran out of memory evaluating in batches of %d molecules: "
            "evaluated in batches of %d (eval_batch_size=%d fits)",
            batch_size,
            size,
            size,
        )
    return result


def _checked_fraction(fraction: object) -> float:
    """A share of the memory: more than nothing, at most all of it."""
    try:
        value = float(fraction)
    except (TypeError, ValueError):
        value = math.nan
    if not 0 < value <= 1:
        raise InputError(
            f"memory_fraction must be a share of the memory available, above 0 and at most "
            f"1 (0.85: 85%); got {fraction!r}"
        )
    return value


def molecule_sizes(dataset: Dataset) -> np.ndarray:
    """What a molecule's memory grows with: its tokens or atoms; all alike for vectors."""
    for name in ("lengths", "atom_counts"):
        sizes = getattr(dataset, name, None)
        if sizes is not None:
            return np.asarray(sizes)
    return np.zeros(len(dataset), dtype=np.int64)


def _largest_size(dataset: Dataset) -> int:
    return int(molecule_sizes(dataset).max())


def step_cost(
    model: L.LightningModule,
    dataset: Dataset,
    collate: Callable,
    device: torch.device,
    batches: TrainingBatches | int,
    room: float,
) -> BatchCost:
    """The model's training step's curve on `batches` (its dataset), or its evaluation's
    upper bound on `dataset` in batches of at most `batches` molecules; no probe is meant
    to take more than `room` bytes."""
    training = isinstance(batches, TrainingBatches)
    step = training_step if training else evaluation_step

    def peak(indices: list[int]) -> int:
        batch = collate(dataset.__getitems__(indices)).to(device)
        with measured(device) as result:
            for _ in range(PROBE_STEPS if training else 1):
                step(model, batch)
        return result()

    batch_size = batches.batch_size if training else batches
    quantiles = ENDS if training else LARGEST
    with collecting_only_new_objects():
        return measure_cost(peak, molecule_sizes(dataset), batch_size, room, quantiles)


def _fit_training(
    training: TrainingBatches,
    cost: BatchCost,
    budget: float,
    weights: int,
    available: float,
    fraction: float,
    processes: int,
) -> tuple[float, int]:
    """The need of the largest training step and how many batches were sized, or
    `BatchTooLarge` when it does not fit `budget`, naming the largest batch size that
    does."""
    sizes = molecule_sizes(training.dataset)
    wanted = training.batch_size
    needed, batches = training_need(cost, training, sizes, weights, wanted)
    if needed <= budget:
        return needed, batches
    fits = largest_fitting_batch(cost, training, sizes, weights, budget)
    shared = f" over {processes} processes" if processes > 1 else ""
    raise BatchTooLarge(
        f"model.batch_size={wanted} needs about {needed / MB:,.0f} MB for its largest "
        f"training step (of the {batches:,} batches the sampler draws, measured on the "
        f"largest training molecules), and this run has {budget / MB:,.0f} MB "
        f"({fraction:.0%} of {available / MB:,.0f} MB available{shared}): "
        + (
            f"lower model.batch_size to {fits} or less, or use a machine with more memory"
            if fits
            else "use a machine with more memory (memory_limit_mb= sets what a run may use)"
        )
    )


def training_need(
    cost: BatchCost,
    training: TrainingBatches,
    sizes: np.ndarray,
    weights: int,
    batch_size: int,
) -> tuple[float, int]:
    """The largest estimated training step of the batches the sampler draws with
    `batch_size` (up to `MOST_DRAWN` molecules), with the optimiser's state beside it
    (`weights`: the parameters' bytes); and how many batches that was."""
    worst, batches, drawn = 0.0, 0, 0
    for order in training.orders(batch_size):
        if len(order):
            peaks = cost.of_batches(order, batch_size, sizes)
            worst, batches = max(worst, float(peaks.max())), batches + len(peaks)
        drawn += len(order)
        if drawn >= MOST_DRAWN:
            break
    return worst + OPTIMIZER_COPIES * weights, batches


def largest_fitting_batch(
    cost: BatchCost, training: TrainingBatches, sizes: np.ndarray, weights: int, budget: float
) -> int:
    """The largest batch size below the run's whose training steps fit `budget`, 0 if
    none (the need grows with the batch size)."""
    low, high = 0, training.batch_size - 1
    while low < high:
        middle = (low + high + 1) // 2
        fits = training_need(cost, training, sizes, weights, middle)[0] <= budget
        low, high = (middle, high) if fits else (low, middle - 1)
    return low


def evaluation_step(model: L.LightningModule, batch) -> None:
    """A prediction as evaluation makes it, without gradients."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        model.predict_test(batch)
    model.train(was_training)


def training_step(model: L.LightningModule, batch) -> None:
    """The loss and its backward pass, as a training step makes them (the optimiser's
    update is costed apart: `OPTIMIZER_COPIES`); the gradients are dropped after."""
    model.zero_grad(set_to_none=True)
    with warnings.catch_warnings():  # its self.log() has no trainer to log to yet
        warnings.simplefilter("ignore")
        loss = model.training_step(batch, 0)
    loss.backward()
    model.zero_grad(set_to_none=True)
