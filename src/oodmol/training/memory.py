"""Batches that fit the machine a run is given.

On a CPU the kernel's out-of-memory killer ends a process without a word: no message, no
record, nothing to retry. So before training, a run measures what its model needs per
molecule (a forward pass without gradients for evaluation, a forward and backward pass
for training, on the training set's largest molecules at two small batch sizes), and

- evaluates in batches no larger than fit in its share of the memory available
  (`eval_batch_size` is then an upper bound), and
- refuses to start, saying how much memory a training step would need and which batch
  size would fit, when even its training batch does not.

Memory is measured as it is allocated: on a CUDA device by torch's allocator statistics,
on the CPU by counting the bytes of every tensor an operation creates while it lives
(`PeakMemory`), which neither the process's resident size (the allocator keeps freed
memory) nor tracemalloc (torch allocates in C++) can tell. `memory_limit_mb` replaces what
the machine has (a share of a node, or a test).
"""

from __future__ import annotations

import math
import os
import warnings
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import lightning as L
import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from oodmol.errors import UserError

MB = 2**20
PROBE_SIZES = (1, 2)  # molecules per probe batch: the two points of a line


class BatchTooLarge(UserError):
    """A training batch that cannot fit the memory this run has."""


class PeakMemory(TorchDispatchMode):
    """The peak of the bytes held by tensors that operations create inside the block.

    A tensor that shares an input's storage (a view, an in-place result) is not new
    memory. A storage is freed when the tensor an operation returned is collected, so a
    view kept longer than its base is counted short: an estimate, which the run's share
    of the machine (`fraction`) leaves room for."""

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self._held: dict[int, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {_storage(t) for t in tree_flatten((args, kwargs))[0] if _is_tensor(t)}
        for tensor in tree_flatten(out)[0]:
            if not _is_tensor(tensor):
                continue
            pointer = _storage(tensor)
            if pointer == 0 or pointer in inputs or pointer in self._held:
                continue
            size = tensor.untyped_storage().nbytes()
            self._held[pointer] = size
            self.live += size
            self.peak = max(self.peak, self.live)
            weakref.finalize(tensor, self._free, pointer)
        return out

    def _free(self, pointer: int) -> None:
        self.live -= self._held.pop(pointer, 0)


def _is_tensor(value: object) -> bool:
    return isinstance(value, torch.Tensor) and value.device.type != "meta"


def _storage(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().data_ptr()


@contextmanager
def measured(device: torch.device) -> Iterator[Callable[[], int]]:
    """The peak bytes allocated inside the block, read once it has ended."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        start = torch.cuda.memory_allocated(device)
        result: list[int] = []
        yield lambda: result[0]
        torch.cuda.synchronize(device)
        result.append(torch.cuda.max_memory_allocated(device) - start)
    else:
        mode = PeakMemory()
        with mode:
            yield lambda: mode.peak


def available_bytes(device: torch.device, limit_mb: float | None = None) -> int:
    """The memory a run may use: `limit_mb` if given, else what the device has free (a
    GPU), or what the machine's kernel says is available (MemAvailable, within a
    cgroup's limit where one is set)."""
    if limit_mb is not None:
        return int(limit_mb * MB)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    available = _meminfo_available()
    cgroup = _cgroup_room()
    return min(v for v in (available, cgroup) if v is not None) if cgroup else available


def _meminfo_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def _cgroup_room() -> int | None:
    """What a cgroup (v2) memory limit still leaves, where one is set."""
    folder = Path("/sys/fs/cgroup")
    try:
        limit = (folder / "memory.max").read_text().strip()
        used = int((folder / "memory.current").read_text())
    except (OSError, ValueError):
        return None
    return None if limit == "max" else max(int(limit) - used, 0)


@dataclass(frozen=True)
class MemoryPlan:
    """What a run measured and chose: bytes per molecule and fixed, in MB, for
    evaluation and for a training step; the evaluation batch it will use."""

    available_mb: float
    budget_mb: float
    eval_fixed_mb: float
    eval_per_molecule_mb: float
    train_fixed_mb: float
    train_per_molecule_mb: float
    train_batch: int
    train_need_mb: float
    eval_batch_requested: int
    eval_batch: int

    def facts(self) -> dict:
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(self).items()}


def plan_memory(
    model: L.LightningModule,
    dataset,
    collate: Callable,
    device: torch.device,
    batch_size: int | None,
    eval_batch_size: int,
    fraction: float,
    limit_mb: float | None = None,
    processes: int = 1,
) -> MemoryPlan | None:
    """Measure the model on the largest molecules of `dataset` (the training set, or
    the molecules to predict) and choose the evaluation batch; with a training
    `batch_size`, `BatchTooLarge` when a training step cannot fit. None for a model
    without trained parameters (the forest), whose memory is its own affair."""
    if not any(p.requires_grad for p in model.parameters()):
        return None
    available = available_bytes(device, limit_mb)
    budget = available * fraction / processes
    largest = _largest_first(dataset)[: max(PROBE_SIZES)]
    model = model.to(device)

    def batch(size: int):
        items = dataset.__getitems__([int(i) for i in largest[:size]])
        return collate(items).to(device)

    evaluation = _line(lambda b: _evaluate(model, batch(b)), device)
    training = _line(lambda b: _train_step(model, batch(b)), device) if batch_size else (0, 0)
    batch_size = batch_size or 0
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    train_fixed = training[0] + 4 * weights  # the weights, their gradients, Adam's two moments
    train_need = train_fixed + training[1] * batch_size
    if train_need > budget:
        fits = max(0, math.floor((budget - train_fixed) / training[1])) if training[1] else 0
        raise BatchTooLarge(
            f"model.batch_size={batch_size} needs about {train_need / MB:,.0f} MB per training "
            f"step (measured on the largest training molecules), and this run has "
            f"{budget / MB:,.0f} MB ({fraction:.0%} of {available / MB:,.0f} MB available"
            f"{f' over {processes} processes' if processes > 1 else ''}): "
            + (
                f"lower model.batch_size to {fits} or less, or use a machine with more memory"
                if fits
                else "use a machine with more memory (memory_limit_mb= sets what a run may use)"
            )
        )
    # validation runs beside the weights and the optimiser's two moments (the gradients
    # are freed by then)
    eval_fixed = evaluation[0] + 3 * weights
    room = budget - eval_fixed
    fitting = math.floor(room / evaluation[1]) if evaluation[1] else eval_batch_size
    eval_batch = int(max(1, min(eval_batch_size, fitting)))
    return MemoryPlan(
        available / MB,
        budget / MB,
        eval_fixed / MB,
        evaluation[1] / MB,
        train_fixed / MB,
        training[1] / MB,
        batch_size,
        train_need / MB,
        eval_batch_size,
        eval_batch,
    )


def _line(step: Callable[[int], None], device: torch.device) -> tuple[float, float]:
    """(fixed bytes, bytes per molecule) of `step` from two probe sizes; the random
    generators are left as they were, so measuring changes no run."""
    peaks = []
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        for size in PROBE_SIZES:
            with measured(device) as peak:
                step(size)
            peaks.append(peak())
    (b1, b2), (p1, p2) = PROBE_SIZES, peaks
    per_molecule = max(0.0, (p2 - p1) / (b2 - b1))
    return max(0.0, p1 - per_molecule * b1), per_molecule


def _largest_first(dataset) -> np.ndarray:
    sizes = getattr(dataset, "atom_counts", None)
    if sizes is None:
        sizes = getattr(dataset, "lengths", None)
    if sizes is None:
        return np.arange(len(dataset))
    return np.argsort(-np.asarray(sizes), kind="stable")


def _evaluate(model: L.LightningModule, batch) -> None:
    was_training = model.training
    model.eval()
    with torch.no_grad():
        model.predict_test(batch)
    model.train(was_training)


def _train_step(model: L.LightningModule, batch) -> None:
    model.zero_grad(set_to_none=True)
    with warnings.catch_warnings():  # its self.log() has no trainer to log to yet
        warnings.simplefilter("ignore")
        loss = model.training_step(batch, 0)
    loss.backward()
    model.zero_grad(set_to_none=True)
