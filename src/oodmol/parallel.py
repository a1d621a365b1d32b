"""One way to run per-molecule work across cores, with a progress bar, where one molecule
that crashes or hangs its worker is refused and the rest go on; one place that bounds
how many cores and threads a run uses (`threads=N`); this process's rank."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import pickle
import signal
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from types import TracebackType
from typing import Any, TypeVar

from lightning_utilities.core.rank_zero import rank_zero_only
from threadpoolctl import threadpool_limits
from tqdm.auto import tqdm

from oodmol.interrupts import signals_deferred

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

_IDLE = -1.0  # a worker's slot between items
_BATCH_SECONDS = 0.05  # measured work per message to a worker
_MAX_BATCH = 256  # items per message at most
_PARENT_CHECK_SECONDS = 1.0  # how often an idle worker checks that its parent lives
_STOP_SECONDS = 5.0  # how long a worker told to stop may take before it is killed
_MAX_UNEXPLAINED_DEATHS = 3  # workers dying with no item to blame, in a row, before the run fails
_STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP})
_PR_SET_PDEATHSIG = 1  # prctl(2)

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


# the values of TOKENIZERS_PARALLELISM under which Hugging Face's tokenizers run serially
_SERIAL = ("", "off", "false", "f", "no", "n", "0")


def start_method() -> str:
    """fork where the platform has it; spawn elsewhere. Hugging Face's `tokenizers`
    (loaded with Lightning) runs a thread pool that a fork must not copy: unless the
    user asked for it (TOKENIZERS_PARALLELISM=true: then a fork server, whose workers
    re-import the main module, seconds each), its parallelism is turned off for this
    process first, which our workers, one process per core already, do not miss."""
    methods = multiprocessing.get_all_start_methods()
    if "fork" not in methods:
        return "spawn"
    if "tokenizers" in sys.modules:
        wanted = os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        if wanted.strip().lower() not in _SERIAL and "forkserver" in methods:
            return "forkserver"
    return "fork"


@dataclass(frozen=True)
class Refused:
    """What `process_map` gives in place of an item's result when it gave up on the item:
    its worker process died on it, or it ran past the time limit."""

    reason: str


class WorkerTraceback(Exception):
    """The traceback, in the worker process, of an exception that `fn` raised there."""


def process_map(
    fn: Callable[[T], R],
    items: Iterable[T],
    total: int,
    desc: str,
    n_jobs: int | None = None,
    progress: bool = True,
    time_limit: float | None = None,
) -> Iterator[R | Refused]:
    """`map(fn, items)` in order, across `n_jobs` worker processes (None: every
    available core; never more than `limit_cores` allows), where no item can end the run.

    Per-molecule work runs RDKit's C++ code, which can crash (a segfault on a huge
    SMILES), be killed for its memory, or run for minutes, and which no Python signal
    can interrupt. So each item runs in a worker process, which notes in shared memory
    which item it is on and since when; this process waits on the workers' pipes, their
    exit and the nearest deadline (`multiprocessing.connection.wait`). An item whose
    worker dies under it, or that runs past `time_limit` seconds (its worker is then
    killed), comes back as `Refused` with the reason; a fresh worker takes the place of
    the old one, the other items of its batch run again, and the rest go on. An
    exception that `fn` raises is raised here, at that item's place in the order.

    Work goes out in batches of about `_BATCH_SECONDS` of measured work, so that a
    cheap `fn` (a Morgan fingerprint takes 0.1 ms) is not dominated by messages while a
    slow one goes one item at a time. It never runs in this process, even for one item
    or on one core: there a crash would end the run and a hang could not be stopped; a
    worker costs a fork, a few milliseconds. With `n_jobs=1` this process only waits,
    so the run still uses one core. `total` is the number of items.

    Workers are forked where the platform allows it: unlike spawn and forkserver, fork
    does not re-import the caller's main module, so a script without an
    `if __name__ == "__main__"` guard cannot recurse into itself (and deadlock on a
    cache lock), and a worker starts in milliseconds, not in the seconds of the main
    module's imports. The workers run RDKit only, never torch, so the usual hazard of
    forking a threaded parent does not arise, but for Hugging Face's `tokenizers`,
    whose thread pool `start_method` turns off first.
    """
    if total == 0:
        return
    bar = tqdm(total=total, desc=desc, disable=not progress, unit="mol", mininterval=1.0)
    with bar, _Supervisor(fn, total, worker_count(n_jobs), time_limit) as supervisor:
        for result in supervisor.run(iter(items)):
            bar.update()
            yield result


@dataclass(frozen=True)
class _Failed:
    """An exception that `fn` raised in a worker, and its traceback there."""

    error: Exception
    traceback: str


class _Worker:
    """One worker process; this process's end of its pipe; its slot in shared memory,
    which holds the index of the item it is on (`_IDLE` between items) and when it
    began that item (`time.monotonic`, one clock for every process of the machine); and
    the batch of (index, item) it was sent and has not answered."""

    def __init__(self, context: multiprocessing.context.BaseContext, fn: Callable) -> None:
        self.slot = context.RawArray("d", [_IDLE, 0.0])
        self.conn, child = context.Pipe()
        self.batch: list[tuple[int, Any]] = []
        self.process = context.Process(target=_work, args=(child, fn, self.slot), daemon=True)
        self.process.start()
        child.close()

    def send(self, batch: list[tuple[int, Any]]) -> None:
        self.batch = batch
        with suppress(OSError):  # it died meanwhile: its sentinel says so, the batch goes again
            self.conn.send(batch)

    def item(self) -> tuple[int, float] | None:
        """The index of the item the worker is on and when it began; None between items.

        The worker writes the start before the index, and the index is read first, so a
        start read here is never older than the index's own."""
        index = self.slot[0]
        began = self.slot[1]
        return None if index == _IDLE else (int(index), began)

    def answer(self) -> tuple[list[tuple[bool, Any]], float] | None:
        """The worker's answer to its batch (each item's outcome, and the seconds the
        batch took), if it has sent one."""
        try:
            return self.conn.recv() if self.conn.poll() else None
        except (EOFError, OSError):  # it died before or while sending
            return None

    def stop(self, kill: bool) -> None:
        """End the process (told to, or killed) and wait for it, so none is left behind."""
        if not kill:
            try:
                self.conn.send(None)
            except OSError:
                kill = True
        if kill:
            self.process.kill()
        self.process.join(_STOP_SECONDS)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()


class _Supervisor:
    """The parent's side of `process_map`: feeds the workers, collects their answers in
    input order, and replaces a worker that died or overran."""

    def __init__(self, fn: Callable, total: int, n_workers: int, time_limit: float | None):
        self.fn = fn
        self.total = total
        self.n_workers = max(1, min(n_workers, total))
        self.time_limit = time_limit
        self.context = multiprocessing.get_context(start_method())
        self.workers: list[_Worker] = []
        self.again: deque[tuple[int, Any]] = deque()  # items of lost batches, first out
        self.done: dict[int, Any] = {}  # results not yet handed on, by index
        self.taken = 0  # items read from the input
        self.seconds_per_item: float | None = None
        self.unexplained = 0  # worker deaths in a row that no item explains

    def __enter__(self) -> _Supervisor:
        try:
            for _ in range(self.n_workers):
                self._start(len(self.workers))
        except BaseException:
            self._stop(kill=True)
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType
    ) -> None:
        self._stop(kill=kind is not None)

    def _start(self, index: int) -> None:
        """Start a worker as `self.workers[index]` (a new one, or in place of one that
        ended). A stop signal arriving meanwhile takes effect once the worker is on the
        list, from which nothing is left behind: raised in the middle of the fork, it
        would leave a process that no one knows."""
        with signals_deferred():
            worker = _Worker(self.context, self.fn)
            if index == len(self.workers):
                self.workers.append(worker)
            else:
                self.workers[index] = worker

    def _stop(self, kill: bool) -> None:
        """End every worker: told to when the work is done, killed when it was cut short
        (an exception, a stop signal, a consumer that stopped reading)."""
        for worker in self.workers:
            worker.stop(kill)

    def run(self, items: Iterator) -> Iterator:
        source = enumerate(items)
        next_out = 0
        while True:
            for worker in self.workers:
                if not worker.batch and (batch := self._next_batch(source)):
                    worker.send(batch)
            while next_out in self.done:
                result = self.done.pop(next_out)
                next_out += 1
                if isinstance(result, _Failed):
                    raise result.error from WorkerTraceback(result.traceback)
                yield result
            if not any(worker.batch for worker in self.workers):
                return
            self._handle(set(wait(self._waitables(), self._timeout())))

    def _next_batch(self, source: Iterator[tuple[int, Any]]) -> list[tuple[int, Any]]:
        """Items of lost batches first, then new ones: one until the work has been timed,
        then about `_BATCH_SECONDS` of it, and no more than an even share of what is left."""
        size = 1
        if self.seconds_per_item is not None:
            share = -(-max(1, self.total - self.taken) // len(self.workers))
            size = min(int(_BATCH_SECONDS / max(self.seconds_per_item, 1e-7)), _MAX_BATCH, share)
        batch = []
        while self.again and len(batch) < max(1, size):
            batch.append(self.again.popleft())
        while len(batch) < max(1, size) and (pair := next(source, None)) is not None:
            batch.append(pair)
            self.taken += 1
        return batch

    def _waitables(self) -> list[Connection | int]:
        busy = [worker.conn for worker in self.workers if worker.batch]
        return [*busy, *(worker.process.sentinel for worker in self.workers)]

    def _timeout(self) -> float | None:
        """Seconds until the nearest deadline; a worker between items starts its next
        one no earlier than now."""
        if self.time_limit is None:
            return None
        now = time.monotonic()
        began = [item[1] for worker in self.workers if (item := worker.item()) is not None]
        return max(0.0, min((t + self.time_limit - now for t in began), default=self.time_limit))

    def _handle(self, ready: set) -> None:
        for i, worker in enumerate(self.workers):
            if worker.conn in ready or worker.process.sentinel in ready:
                answer = worker.answer()
                if answer is not None:
                    self._record(worker, answer)
                if worker.process.sentinel in ready:
                    self._died(i)
        if self.time_limit is None:
            return
        now = time.monotonic()
        for i, worker in enumerate(self.workers):
            item = worker.item()
            if item is not None and now - item[1] > self.time_limit:
                self._overran(i, item[0])

    def _record(self, worker: _Worker, answer: tuple[list[tuple[bool, Any]], float]) -> None:
        outcomes, seconds = answer
        for (index, _), (ok, value) in zip(worker.batch, outcomes, strict=True):
            self.done[index] = value if ok else _Failed(*value)
        per_item = seconds / len(outcomes)
        previous = self.seconds_per_item
        self.seconds_per_item = per_item if previous is None else (previous + per_item) / 2
        worker.batch = []
        self.unexplained = 0

    def _died(self, i: int) -> None:
        """Replace worker `i`, which died: the item it was on is refused, unless a stop
        signal ended it (`_stopped`: its batch goes out again, as a build stopped and
        started again would give it). A death with no item to blame is counted, so that
        workers that cannot run at all end the run instead of being restarted forever."""
        worker = self.workers[i]
        worker.process.join()  # its exit code, now that its sentinel says it ended
        item = worker.item()
        reason = _death(worker.process.exitcode)
        stopped = _stopped(worker.process.exitcode)
        if (item is None and worker.batch) or stopped:
            self.unexplained += 1
            if self.unexplained > _MAX_UNEXPLAINED_DEATHS:
                raise RuntimeError(
                    f"{self.unexplained} worker processes in a row ended with no item to "
                    f"blame ({reason}); the messages above may say why"
                )
        self._replace(i, None if item is None or stopped else item[0], reason)

    def _overran(self, i: int, index: int) -> None:
        """Kill worker `i`, whose item ran past the time limit, and replace it; the
        item is refused unless the worker had moved on just before."""
        worker = self.workers[i]
        worker.process.kill()
        worker.process.join()
        answer = worker.answer()
        if answer is not None:  # it finished its batch meanwhile
            self._record(worker, answer)
        item = worker.item()
        still = answer is None and item is not None and item[0] == index
        self._replace(i, index if still else None, f"time limit of {self.time_limit:g} s exceeded")

    def _replace(self, i: int, culprit: int | None, reason: str) -> None:
        """A fresh worker in place of worker `i`, which ended: `culprit`, an item of its
        batch, is refused for `reason`, and the rest of the batch goes out again."""
        worker = self.workers[i]
        if culprit is not None:
            self.done[culprit] = Refused(reason)
        self.again.extendleft(reversed([pair for pair in worker.batch if pair[0] != culprit]))
        worker.batch = []
        worker.stop(kill=True)
        self._start(i)


def _stopped(exitcode: int | None) -> bool:
    """Whether a stop signal from outside ended the worker (an operator's `kill`, a
    scheduler's pre-emption of the job's processes, a closed terminal), not its item."""
    return exitcode is not None and -exitcode in _STOP_SIGNALS


def _death(exitcode: int | None) -> str:
    """Why a worker process ended, from its exit code."""
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name
        hint = " (out of memory?)" if -exitcode == signal.SIGKILL else ""
        return f"its worker process died of {name}{hint}"
    return f"its worker process exited with status {exitcode}"


def _work(conn: Connection, fn: Callable, slot: Any) -> None:
    """A worker's loop: a batch in, its outcomes out, until told to stop or orphaned.

    Before each item the worker notes it in `slot`, which its parent reads to know
    which item a dead or overrunning worker was on. Ctrl-C reaches the whole process
    group: the parent alone decides what it means, so workers ignore it. A worker dies
    with its parent: on Linux the kernel kills it (`PR_SET_PDEATHSIG`), elsewhere it
    notices within `_PARENT_CHECK_SECONDS` while it waits for work."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    parent = os.getppid()
    if sys.platform.startswith("linux"):  # killed with its parent, even mid-RDKit
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            return
    while True:
        while not conn.poll(_PARENT_CHECK_SECONDS):
            if os.getppid() != parent:
                return  # the parent died without stopping this worker
        try:
            batch = conn.recv()
        except EOFError:
            return
        if batch is None:
            return
        started = time.perf_counter()
        outcomes = []
        for index, item in batch:
            slot[1] = time.monotonic()
            slot[0] = index
            try:
                outcomes.append((True, fn(item)))
            except Exception as error:
                outcomes.append((False, _portable(error)))
            slot[0] = _IDLE
        conn.send((outcomes, time.perf_counter() - started))


def _portable(error: Exception) -> tuple[Exception, str]:
    """An exception as it can travel to the parent (one that does not survive pickling
    becomes a RuntimeError with its text), with its traceback here."""
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        error = RuntimeError(f"{type(error).__name__}: {error}")
    return error, text
