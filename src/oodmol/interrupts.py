"""Stop signals during a build: one message, an exit status of 128 + the signal, and
nothing left behind.

Left to its default, SIGTERM kills the process where it stands: a feature cache's
temporary file stays, and its worker processes are orphaned. Inside `interruptible`,
SIGTERM and SIGINT raise `Interrupted` instead, so the build unwinds through its own
cleanup (temporary files removed, worker processes ended) and the entry point shows its
message (`oodmol.errors.door`). The handlers that were there before come back when the
build ends: training installs its own for pre-emption (`oodmol.training.preemption`).
Worker processes start with the signals deferred (`signals_deferred`), so that a signal
never lands between a fork and the record of its process.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from oodmol.errors import OodmolError

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
NOTHING_KEPT = "nothing was kept; run again to build it"


class Interrupted(OodmolError):
    """A stop signal that ended a build; its exit status is 128 + the signal's number,
    as a shell reports a process that the signal killed (130 for SIGINT, 143 for
    SIGTERM)."""

    def __init__(self, signum: int, doing: str, outcome: str) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name} while {doing}: {outcome}")
        self.exit_code = 128 + signum


class _Stop(BaseException):
    """What the handler raises: not an `Exception`, so that no `except Exception` of the
    code it lands in can swallow it; `interruptible` turns it into `Interrupted` once
    that code has cleaned up."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextmanager
def interruptible(doing: str, outcome: str = NOTHING_KEPT) -> Iterator[None]:
    """Inside it, SIGTERM and SIGINT stop the work and raise `Interrupted` (its
    message: "interrupted by <signal> while <doing>: <outcome>"); a further signal is
    ignored until the work has cleaned up, and one that arrives as the block ends goes
    to the handler from before. A signal that this process ignores (SIGINT in a job a
    shell started in the background) stays ignored. Outside the main thread, where
    Python delivers no signal, it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    caught = [s for s, handler in previous.items() if handler is not signal.SIG_IGN]
    late: list[int] = []  # signals that arrived once the work was over

    def stop(signum: int, frame: FrameType | None) -> None:
        if finished:
            late.append(signum)
            return
        for s in caught:
            signal.signal(s, signal.SIG_IGN)
        raise _Stop(signum)

    finished = False
    for s in caught:
        signal.signal(s, stop)
    try:
        yield
    except _Stop as stopped:
        raise Interrupted(stopped.signum, doing, outcome) from None
    finally:
        finished = True
        for s in caught:  # None: a handler not set from Python, which cannot be restored
            signal.signal(s, signal.SIG_DFL if previous[s] is None else previous[s])
        if late:
            signal.raise_signal(late[0])


@contextmanager
def signals_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM that arrive inside the block are handled at its end, by the
    handlers there were (only the main thread handles signals, so elsewhere it changes
    nothing). Blocking them would not do: another thread of the process (tqdm's monitor,
    torch's pools) takes a blocked signal, and Python runs its handler all the same."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = {}
    for signum in STOP_SIGNALS:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            previous[signum] = signal.signal(signum, lambda n, frame: received.append(n))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
        if received:
            signal.raise_signal(received[0])
