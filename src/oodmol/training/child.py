"""Training runs in child processes, as `oodmol train` would run them: for the tools
that train many runs (campaigns, the transfer study, reproduction, ensemble members side
by side), each run gets a process of its own, so one run's state (Hydra's, torch's
threads, a crash) never reaches another.

The children are forked from a server process (`oodmol.apps.fork_server`) that imported
torch, Lightning and the training app once and runs nothing itself, rather than started
afresh: a child begins where a fresh interpreter would be after its imports, seconds
later, which on a small data set is most of a run. Each child takes this process's
working folder, environment and ignored signals as they are when it starts; where the
environment has
changed what only an interpreter's start reads, a new server starts."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

SERVER = "oodmol.apps.fork_server"  # a process of its own: an entry point
# read when an interpreter or a native library starts, which a forked child does not: a
# change of them since the server started starts a new one
STARTUP_VARIABLES = ("PYTHON", "LD_", "OMP_", "MKL_", "KMP_", "OPENBLAS_", "MALLOC_")


# signals whose SIG_IGN a fresh interpreter inherits from its parent (a job started in the
# background by a shell ignores SIGINT, one under nohup SIGHUP): a child mirrors them
INHERITED_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")


def ignored_signals() -> list[str]:
    """Those of INHERITED_SIGNALS that this process ignores."""
    return [s for s in INHERITED_SIGNALS if signal.getsignal(getattr(signal, s)) == signal.SIG_IGN]


def startup_environment() -> dict[str, str]:
    """The part of this process's environment that only a start reads."""
    return {k: v for k, v in os.environ.items() if k.startswith(STARTUP_VARIABLES)}


class _ForkServer:
    """The server process and the two pipes to it; the replies it has sent so far."""

    def __init__(self) -> None:
        self.started_with = startup_environment()
        requests_read, self.requests = os.pipe()
        self.replies, replies_write = os.pipe()
        self.process = subprocess.Popen(
            [sys.executable, "-m", SERVER, str(requests_read), str(replies_write)],
            pass_fds=(requests_read, replies_write),
            stdin=subprocess.DEVNULL,
        )
        os.close(requests_read)
        os.close(replies_write)
        self.numbers = itertools.count()
        self.pids: dict[int, int] = {}
        self.exits: dict[int, int] = {}
        self.unread = b""

    def start(self, overrides: Sequence[str], log: Path | None) -> ForkedRun:
        number = next(self.numbers)
        request = {
            "id": number,
            "argv": list(overrides),
            "env": dict(os.environ),
            "cwd": os.getcwd(),
            "log": None if log is None else str(log),
            "ignored_signals": ignored_signals(),
        }
        os.write(self.requests, (json.dumps(request) + "\n").encode())
        while number not in self.pids:
            self.read(timeout=None)
        return ForkedRun(self, number, self.pids.pop(number))

    def read(self, timeout: float | None) -> None:
        """The replies that arrive within `timeout` seconds (None: at least one)."""
        if not select.select([self.replies], [], [], timeout)[0]:
            return
        chunk = os.read(self.replies, 1 << 16)
        if not chunk:  # the server ended: the children it forked have no one to report them
            raise RuntimeError(f"the training fork server ({SERVER}) ended unexpectedly")
        *lines, self.unread = (self.unread + chunk).split(b"\n")
        for line in lines:
            reply = json.loads(line)
            if "pid" in reply:
                self.pids[reply["id"]] = reply["pid"]
            else:
                self.exits[reply["id"]] = reply["exit"]

    def close(self) -> None:
        """No more runs: the server ends once its last child has."""
        os.close(self.requests)
        self.process.wait()
        os.close(self.replies)


class ForkedRun:
    """A run forked from the server, handled as a `subprocess.Popen` of it would be."""

    def __init__(self, server: _ForkServer, number: int, pid: int) -> None:
        self.server, self.number, self.pid = server, number, pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.server.read(timeout=0)
            self.returncode = self.server.exits.pop(self.number, None)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(f"{SERVER} child {self.pid}", timeout or 0)
            self.server.read(timeout=left)
        return self.returncode  # type: ignore[return-value]

    def send_signal(self, number: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, number)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


_server: _ForkServer | None = None


def start_train(overrides: Sequence[str], log: Path | None = None) -> ForkedRun:
    """Start train.py with `overrides` in a child process, its output into `log` (both
    streams; None: this process's)."""
    global _server
    if (
        _server is None
        or _server.process.poll() is not None
        or _server.started_with != startup_environment()
    ):
        if _server is not None and _server.process.poll() is None:
            _server.close()
        _server = _ForkServer()
    for stream in (sys.stdout, sys.stderr):  # our lines before the child's
        stream.flush()
    return _server.start(overrides, log)


def run_train(overrides: Sequence[str]) -> int:
    """Run train.py with `overrides` in a child process; its exit status (minus the
    signal's number where a signal ended it). Interrupted while the child trains, this
    process passes SIGTERM on to it (it saves its last checkpoint) and waits for it."""
    run = start_train(overrides)
    try:
        return run.wait()
    except BaseException:
        run.send_signal(signal.SIGTERM)
        run.wait()
        raise
