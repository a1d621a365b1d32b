"""Stop signals during a build: one message, an exit status of 128 + the signal, and
nothing left behind.

Left to its default, SIGTERM kills the process where it stands: a feature cache's
temporary file stays, and its worker processes are orphaned. Inside `interruptible`,
SIGTERM and SIGINT raise `Interrupted` instead, so the build unwinds through its own
cleanup (temporary files removed, worker processes ended) and the entry point shows its
message (`oodmol.errors.door`). The handlers that were there before come back when the
build ends: training installs its own for pre-emption (`oodmol.training.preemption`).
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from oodmol.errors import OodmolError, message_of

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
NOTHING_KEPT = "nothing was kept; run again to build it"


class Interrupted(OodmolError):
    """A stop signal that ended a build; its exit status is 128 + the signal's number,
    as a shell reports a process that the signal killed (130 for SIGINT, 143 for
    SIGTERM)."""

    def __init__(self, signum: int, doing: str, outcome: str) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name} while {doing}: {outcome}")
        self.signum = signum
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
    ignored until the work has cleaned up. A signal that this process ignores (a job
    started with `nohup`) stays ignored. Outside the main thread, where Python delivers
    no signal, it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    caught = [s for s, handler in previous.items() if handler is not signal.SIG_IGN]

    def stop(signum: int, frame: FrameType | None) -> None:
        for s in caught:
            signal.signal(s, signal.SIG_IGN)
        raise _Stop(signum)

    for s in caught:
        signal.signal(s, stop)
    try:
        yield
    except _Stop as stopped:
        raise Interrupted(stopped.signum, doing, outcome) from None
    finally:
        for s in caught:  # None: a handler not set from Python, which cannot be restored
            signal.signal(s, signal.SIG_DFL if previous[s] is None else previous[s])


@contextmanager
def exit_when_interrupted(program: str = "oodmol") -> Iterator[None]:
    """For the Hydra applications (train, evaluate, predict), whose other errors Hydra
    reports as it does (a failed job of a multirun must not end the others): a stop
    signal during a build ends the process, multirun or not, with `Interrupted`'s
    message and exit status."""
    try:
        yield
    except Interrupted as stop:
        print(message_of(program, stop), file=sys.stderr, flush=True)
        raise SystemExit(stop.exit_code) from None
