"""The process that `oodmol.training.child` forks training runs from: it imports torch,
Lightning and the training app once, runs nothing itself, and for each request forks a
child that runs `python -m oodmol.apps.train <overrides>` as a fresh interpreter would
after its imports. Run as `python -m oodmol.apps.fork_server <requests fd> <replies fd>`.

A request is a JSON line {"id", "argv", "env", "cwd", "log", "ignored_signals"}; the
replies are {"id", "pid"} once its child is forked, then {"id", "exit"} when it ends (its
exit status, minus the signal's number where a signal ended it). Children run side by
side. A child ignores the signals its parent ignored, as a fresh interpreter would, and
writes to `log` where one is named (both streams), else to this process's streams, which
are its parent's. Ctrl-C reaches the children and the parent, not this process; it ends
when its parent has closed the requests and the last child has ended."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import runpy
import select
import signal
import sys
import threading
import time
import traceback

import lightning  # noqa: F401  (the imports every child would repeat)
import rdkit.Chem  # noqa: F401
import torch  # noqa: F401

import oodmol.apps.train
import oodmol.training.run  # noqa: F401
from oodmol.training.child import INHERITED_SIGNALS

TRAIN_APP = "oodmol.apps.train"
IDLE_S = 0.05  # how often an idle server looks for ended children


def take_signals(ignored: list[str]) -> None:
    """The signal handling a fresh interpreter would start with under a parent that
    ignores `ignored`: those ignored, SIGINT otherwise raising KeyboardInterrupt, the
    rest at their default."""
    for name in INHERITED_SIGNALS:
        number = getattr(signal, name)
        default = signal.default_int_handler if number == signal.SIGINT else signal.SIG_DFL
        signal.signal(number, signal.SIG_IGN if name in ignored else default)


def run_child(request: dict, protocol: tuple[int, int]) -> None:
    """In the forked child: the request's environment, folder, streams and arguments, then
    the app as its module's `__main__`; never returns."""
    for fd in protocol:
        os.close(fd)
    take_signals(request["ignored_signals"])
    if request["log"] is not None:
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        for fd in (1, 2):
            os.dup2(log, fd)
        os.close(log)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.path[0] = request["cwd"]  # `python -m` puts the working folder first
    sys.argv = [TRAIN_APP, *request["argv"]]
    # as in a fresh `python -m`, the app runs as `__main__` only (runpy warns otherwise)
    sys.modules.pop(TRAIN_APP, None)
    code = 0
    try:
        runpy.run_module(TRAIN_APP, run_name="__main__", alter_sys=True)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if isinstance(stop.code, str):
            print(stop.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    # what the interpreter runs at its end, in its order: the threads' exit hooks, then
    # the atexit handlers (a logger's last flush)
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def serve(requests: int, replies: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def reply(message: dict) -> None:
        with contextlib.suppress(BrokenPipeError):  # the parent has gone: nobody to tell
            os.write(replies, (json.dumps(message) + "\n").encode())

    running: dict[int, int] = {}  # pid -> the request's id
    pending, reading = b"", True
    while reading or running:
        if reading and select.select([requests], [], [], IDLE_S)[0]:
            chunk = os.read(requests, 1 << 16)
            reading = bool(chunk)
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                request = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    run_child(request, (requests, replies))
                running[pid] = request["id"]
                reply({"id": request["id"], "pid": pid})
        elif not reading:
            time.sleep(IDLE_S)
        for pid in list(running):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                reply({"id": running.pop(pid), "exit": os.waitstatus_to_exitcode(status)})


if __name__ == "__main__":
    serve(int(sys.argv[1]), int(sys.argv[2]))
