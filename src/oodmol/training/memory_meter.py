"""How much memory a block of work takes, as the machine sees it, and how much there is.

On a CUDA device torch's allocator counts every byte it hands out. On the CPU the only
count that holds everything (tensors, the buffers kernels allocate inside themselves,
the allocator's fragmentation) is the process's resident size, which is also what the
kernel's out-of-memory killer reads: a block's peak is how far the resident size rose
above where it started, with what the allocator kept freed handed back first
(`release_freed_memory`) and Linux's high-water mark reset (`/proc/self/clear_refs`).
Counting the tensors that operations return saw a third of GeoFormer's training step.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from oodmol.allocator import release_freed_memory

MB = 2**20
STATUS = Path("/proc/self/status")
CLEAR_REFS = Path("/proc/self/clear_refs")
RESET_HIGH_WATER = "5"  # clear_refs: set the peak resident size to the current one


def can_measure(device: torch.device) -> bool:
    """Whether peaks can be measured here: always on a CUDA device, on the CPU where
    Linux lets a process reset its resident high-water mark."""
    return device.type == "cuda" or os.access(CLEAR_REFS, os.W_OK)


@contextmanager
def measured(device: torch.device) -> Iterator[Callable[[], int]]:
    """The peak bytes the block added, read once it has ended."""
    result: list[int] = []
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        start = torch.cuda.memory_allocated(device)
        yield lambda: result[0]
        torch.cuda.synchronize(device)
        result.append(torch.cuda.max_memory_allocated(device) - start)
        return
    gc.collect()  # what earlier work left in reference cycles is not the block's
    release_freed_memory()
    start = _status("VmRSS")
    CLEAR_REFS.write_text(RESET_HIGH_WATER)
    yield lambda: result[0]
    result.append(max(0, _status("VmHWM") - start))


@contextmanager
def collecting_only_new_objects() -> Iterator[None]:
    """A block of measurements whose collections before each (`measured`) walk only the
    objects made since the block began: a process that imported torch, Lightning and
    the models holds hundreds of thousands, and a full collection of them took 0.3 s,
    most of a small model's memory plan. What was garbage before it is kept, not
    collected, until it ends: memory no measurement can then reuse."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _status(field: str) -> int:
    """A size in bytes from /proc/self/status (given there in kB)."""
    for line in STATUS.read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{STATUS} has no {field}")


def available_bytes(device: torch.device, limit_mb: float | None = None) -> int:
    """The memory a run may still take: `limit_mb` if given, else what the device has
    free (a GPU), or what the machine's kernel says is available (MemAvailable, within a
    cgroup's limit where one is set). What the process already holds is not in it."""
    if limit_mb is not None:
        return int(limit_mb * MB)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    release_freed_memory()
    available = _meminfo_available()
    cgroup = _cgroup_room()
    return min(available, cgroup) if cgroup is not None else available


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
