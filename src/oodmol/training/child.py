"""Training runs in a child process, as `oodmol train` would run them: for the tools that
train many runs one after another (campaigns, the transfer study, reproduction), each
run gets a process of its own, so one run's state (Hydra's, torch's threads, a crash)
never reaches the next.

The children are forked from a server process (`fork_server`) that imported torch,
Lightning and the training app once and runs nothing itself, rather than started
afresh: a child begins where a fresh interpreter would be after its imports, seconds
later, which on a small data set is most of a run. Each child takes this process's
working folder and environment as they are when it starts; where the environment has
changed what only an interpreter's start reads, a new server starts."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from typing import IO

SERVER = "oodmol.training.fork_server"
# read when an interpreter or a native library starts, which a forked child does not: a
# change of them since the server started starts a new one
STARTUP_VARIABLES = ("PYTHON", "LD_", "OMP_", "MKL_", "KMP_", "OPENBLAS_", "MALLOC_")


def startup_environment() -> dict[str, str]:
    """The part of this process's environment that only a start reads."""
    return {k: v for k, v in os.environ.items() if k.startswith(STARTUP_VARIABLES)}


class _ForkServer:
    """The server process, started on the first run, and the two pipes to it."""

    def __init__(self) -> None:
        self.started_with = startup_environment()
        requests_read, requests_write = os.pipe()
        replies_read, replies_write = os.pipe()
        self.process = subprocess.Popen(
            [sys.executable, "-m", SERVER, str(requests_read), str(replies_write)],
            pass_fds=(requests_read, replies_write),
            stdin=subprocess.DEVNULL,
        )
        os.close(requests_read)
        os.close(replies_write)
        self.requests: IO[str] = os.fdopen(requests_write, "w")
        self.replies: IO[str] = os.fdopen(replies_read, "r")

    def reply(self) -> dict:
        line = self.replies.readline()
        if not line:  # the server ended: a child it forked has no one to report it
            raise RuntimeError(f"the training fork server ({SERVER}) ended unexpectedly")
        return json.loads(line)

    def close(self) -> None:
        """No more runs: the server ends once it reads the end of its requests."""
        self.requests.close()
        self.replies.close()
        self.process.wait()

    def run(self, overrides: Sequence[str]) -> int:
        request = {"argv": list(overrides), "env": dict(os.environ), "cwd": os.getcwd()}
        self.requests.write(json.dumps(request) + "\n")
        self.requests.flush()
        pid = self.reply()["pid"]
        try:
            return self.reply()["exit"]
        except BaseException:  # interrupted: the run saves its last checkpoint first
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            self.reply()
            raise


_server: _ForkServer | None = None


def run_train(overrides: Sequence[str]) -> int:
    """Run train.py with `overrides` in a child process; its exit status (minus the
    signal's number where a signal ended it). Interrupted while the child trains, this
    process passes SIGTERM on to it and waits for it to end."""
    global _server
    if (
        _server is None
        or _server.process.poll() is not None
        or _server.started_with != startup_environment()
    ):
        if _server is not None:
            _server.close()
        _server = _ForkServer()
    for stream in (sys.stdout, sys.stderr):  # our lines before the child's
        stream.flush()
    return _server.run(overrides)
