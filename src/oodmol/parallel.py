"""One way to run per-molecule work across cores, with a progress bar; one place that
bounds how many cores and threads a run uses (`threads=N`); this process's rank."""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from lightning_utilities.core.rank_zero import rank_zero_only
from threadpoolctl import threadpool_limits
from tqdm.auto import tqdm

T = TypeVar("T")
R = TypeVar("R")

# Read by OpenMP and BLAS libraries when they load: libraries this process loads later,
# and child processes that start afresh (spawned DDP ranks, launchers), inherit the bound.
THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)
# Where launchers put a process's rank, in the order Lightning reads them.
_RANK_VARIABLES = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")

_core_cap: int | None = None


def limit_cores(n: int | None) -> None:
    """Cap every pool of worker processes oodmol starts at `n` (None: no cap), so a run
    started with `threads=N` on a shared node stays within N cores."""
    global _core_cap
    if n is not None and n < 1:
        raise ValueError(f"limit_cores({n}): a run needs at least one core")
    _core_cap = n


def limit_threads(n: int) -> None:
    """Bound every part of a run to `n` cores: oodmol's worker processes
    (`limit_cores`), the BLAS/OpenMP thread pools already loaded (threadpoolctl) and
    those loaded later or in child processes (`THREAD_VARIABLES`), and torch's intra-op
    threads. For entry points (`threads=N`), before any work starts."""
    import torch  # here, not at the top: the data tools use this module without torch

    limit_cores(n)
    for name in THREAD_VARIABLES:
        os.environ[name] = str(n)
    threadpool_limits(limits=n)
    torch.set_num_threads(n)


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity), at most `limit_cores`'s cap."""
    if hasattr(os, "sched_getaffinity"):
        cores = len(os.sched_getaffinity(0))
    else:
        cores = os.cpu_count() or 1
    return cores if _core_cap is None else min(cores, _core_cap)


def worker_count(n_jobs: int | None) -> int:
    """The processes a pool asked for `n_jobs` (None: every available core) may start:
    an explicit request too stays within `limit_cores`'s cap."""
    n = n_jobs or available_cores()
    return n if _core_cap is None else min(n, _core_cap)


def global_rank() -> int:
    """This process's rank in a distributed run (0 outside one): Lightning's, once it has
    set it, else the launcher's environment; read without importing Lightning, which
    takes seconds."""
    rank = getattr(rank_zero_only, "rank", None)
    if rank is not None:
        return int(rank)
    for name in _RANK_VARIABLES:
        if name in os.environ:
            return int(os.environ[name])
    return 0


def start_method() -> str:
    """fork, unless `tokenizers` is loaded (its threads may be running: forkserver);
    spawn where neither exists."""
    methods = multiprocessing.get_all_start_methods()
    if "tokenizers" in sys.modules and "forkserver" in methods:
        return "forkserver"
    return "fork" if "fork" in methods else "spawn"


def process_map(
    fn: Callable[[T], R],
    items: Iterable[T],
    total: int,
    desc: str,
    n_jobs: int | None = None,
    progress: bool = True,
    serial_below: int = 0,
) -> Iterator[R]:
    """`map(fn, items)` in order, across `n_jobs` processes (None: every available core;
    never more than `limit_cores` allows).

    Workers are forked where the platform allows it: unlike spawn and forkserver, fork
    does not re-import the caller's main module, so a script without an
    `if __name__ == "__main__"` guard cannot recurse into itself (and deadlock on a
    cache lock). The workers run RDKit only, never torch, so the usual hazard of
    forking a threaded parent does not arise, but for Hugging Face's `tokenizers`: once
    this process tokenised (`oodmol.data.tokens`), its thread pool must not be forked,
    so workers come from a fork server instead (`start_method`). Small inputs run in
    this process.
    """
    n_jobs = worker_count(n_jobs)
    bar = tqdm(total=total, desc=desc, disable=not progress, unit="mol", mininterval=1.0)
    with bar:
        if n_jobs == 1 or total < serial_below:
            for result in map(fn, items):
                bar.update()
                yield result
            return
        context = multiprocessing.get_context(start_method())
        chunksize = max(1, min(256, total // (8 * n_jobs)))
        with context.Pool(n_jobs) as pool:
            for result in pool.imap(fn, items, chunksize=chunksize):
                bar.update()
                yield result
