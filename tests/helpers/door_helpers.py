"""Running oodmol's command lines as a user meets them, fast enough for a campaign of a
hundred bad inputs and for every end-to-end run of the suite (`e2e_helpers.TinyTask`).

Each call is a real process with its own argv, working folder and environment, whose exit
status, stdout and stderr are what a terminal would show: a forked copy of one *zygote*
process that imported oodmol's entry points (and torch, Lightning, RDKit) once. The child
runs the entry exactly as its command does: `python train.py ...` runs train.py as
`__main__`, `oodmol <app> ...` runs `python -m oodmol.apps.<app>` (which the `oodmol`
command execs into), `oodmol <tool> ...` calls `oodmol.cli.main`, `python -m <module> ...`
runs the module as `__main__`. Calls run side by side, each in its own child. An exception nobody
caught is printed and ends the child with status 1, as the interpreter does. Forking skips
only the seconds of imports; `test_doors_equal_real_processes` holds a few cases to their
fresh-interpreter runs. On a machine with a CUDA device every call is a fresh interpreter:
the zygote's imports initialise the CUDA driver there, and a fork of such a process cannot
use the device (`CUDA error: initialization error`, seen on an H200).
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from pathlib import Path

import torch
from paths import REPO

ZYGOTE = Path(__file__).with_name("door_zygote.py")
FORKS_LOSE_THE_DEVICE = torch.cuda.is_available()  # asked here, where nothing is forked


@dataclass
class Outcome:
    """What the user saw: exit status and the two streams."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str

    @property
    def last_lines(self) -> str:
        """The end of the terminal, where a user reads why a command stopped."""
        return "\n".join((self.stdout + self.stderr).strip().splitlines()[-3:])

    def shown(self) -> str:
        return (
            f"$ {' '.join(self.argv)}\nexit {self.returncode}\n--- stdout\n"
            f"{self.stdout[-3000:]}\n--- stderr\n{self.stderr[-3000:]}"
        )


class Doors:
    """One zygote, serving calls from any number of threads side by side (`run`). `env`:
    what every call's environment holds beside its own; None: each call brings its
    whole environment (`shared_doors`)."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.env = env or {}
        self.lock = threading.Lock()  # one writer of requests at a time
        self.numbers = itertools.count()
        self.waiting: dict[int, Future] = {}
        self.process: subprocess.Popen | None = None
        if FORKS_LOSE_THE_DEVICE:
            return
        self.process = subprocess.Popen(
            [sys.executable, str(ZYGOTE)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env=env if env is not None else dict(os.environ),
        )
        self.reader = threading.Thread(target=self._read_replies, daemon=True)
        self.reader.start()

    def _read_replies(self) -> None:
        for line in self.process.stdout:
            reply = json.loads(line)
            with self.lock:
                answered = self.waiting.pop(reply["id"])
            answered.set_result(reply)
        with self.lock:
            for unanswered in self.waiting.values():
                unanswered.set_exception(RuntimeError("the zygote ended"))
            self.waiting.clear()

    def run(
        self,
        argv: list[str],
        cwd: Path = REPO,
        env: dict[str, str] | None = None,
        timeout: float = 300,
    ) -> Outcome:
        if self.process is None:
            return real_process(argv, {**self.env, **(env or {})}, cwd, timeout)
        with tempfile.TemporaryDirectory() as folder:
            streams = {name: str(Path(folder) / name) for name in ("stdout", "stderr")}
            answered: Future = Future()
            with self.lock:
                number = next(self.numbers)
                self.waiting[number] = answered
                request = {
                    "id": number,
                    "argv": argv,
                    "cwd": str(cwd),
                    "env": {**self.env, **(env or {})},
                    "timeout": timeout,
                    **streams,
                }
                self.process.stdin.write(json.dumps(request) + "\n")
                self.process.stdin.flush()
            try:
                reply = answered.result(timeout + 30)
            except FutureTimeout:
                raise TimeoutError(f"the zygote did not answer for {argv}") from None
            texts = {n: Path(p).read_text(errors="replace") for n, p in streams.items()}
        if reply["timed_out"]:
            raise TimeoutError(f"{' '.join(argv)} ran over {timeout} s")
        return Outcome(argv, reply["returncode"], texts["stdout"], texts["stderr"])

    def close(self) -> None:
        if self.process is None:
            return
        self.process.stdin.close()
        self.process.wait(timeout=30)
        self.reader.join(timeout=30)


_shared: list[Doors] = []  # this process's zygote, once started
_shared_lock = threading.Lock()


def shared_doors() -> Doors:
    """The zygote of this process (a pytest worker), started at its first call and shared
    by every test module the worker runs: a zygote's imports cost ~10 CPU-seconds. Each
    call brings its whole environment, so modules do not see each other's settings."""
    with _shared_lock:
        if not _shared or (_shared[0].process and _shared[0].process.poll() is not None):
            _shared[:] = [Doors()]
            atexit.register(_shared[0].close)
        return _shared[0]


def real_process(
    argv: list[str], env: dict[str, str], cwd: Path = REPO, timeout: float = 300
) -> Outcome:
    """The same call in a fresh interpreter (`oodmol` as its console script does it)."""
    command = (
        [sys.executable, "-m", "oodmol.cli", *argv[1:]]
        if argv[0] == "oodmol"
        else [sys.executable, *argv]
    )
    done = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    return Outcome(argv, done.returncode, done.stdout, done.stderr)


def environment(root: Path, data_dir: Path) -> dict[str, str]:
    """A user's environment for the calls: caches in `data_dir`, runs under `root`."""
    env = {k: v for k, v in os.environ.items() if k not in ("OODMOL_DEBUG", "HYDRA_FULL_ERROR")}
    return {
        **env,
        "OODMOL_DATA_DIR": str(data_dir),
        "PROJECT_ROOT": str(root / "project"),
        "PYTHONWARNINGS": "ignore",
    }
