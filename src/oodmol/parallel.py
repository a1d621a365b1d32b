"""One way to run per-molecule work across cores, with a progress bar."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from tqdm.auto import tqdm

T = TypeVar("T")
R = TypeVar("R")


def available_cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def process_map(
    fn: Callable[[T], R],
    items: Iterable[T],
    total: int,
    desc: str,
    n_jobs: int | None = None,
    progress: bool = True,
    serial_below: int = 0,
) -> Iterator[R]:
    """`map(fn, items)` in order, across `n_jobs` processes (None: every core).

    Workers are forked where the platform allows it: unlike spawn and forkserver, fork
    does not re-import the caller's main module, so a script without an
    `if __name__ == "__main__"` guard cannot recurse into itself (and deadlock on a
    cache lock). The workers run RDKit only, never torch, so the usual hazard of
    forking a threaded parent does not arise. Small inputs run in this process.
    """
    n_jobs = n_jobs or available_cores()
    bar = tqdm(total=total, desc=desc, disable=not progress, unit="mol", mininterval=1.0)
    with bar:
        if n_jobs == 1 or total < serial_below:
            for result in map(fn, items):
                bar.update()
                yield result
            return
        methods = multiprocessing.get_all_start_methods()
        context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
        chunksize = max(1, min(256, total // (8 * n_jobs)))
        with context.Pool(n_jobs) as pool:
            for result in pool.imap(fn, items, chunksize=chunksize):
                bar.update()
                yield result
