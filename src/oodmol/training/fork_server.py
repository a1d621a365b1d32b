"""The process `child.run_train` forks training runs from: it imports torch, Lightning
and the training app once, runs nothing itself, and for each request forks a child that
runs `python -m oodmol.apps.train <overrides>` as a fresh interpreter would after its
imports. Run as `python -m oodmol.training.fork_server <requests fd> <replies fd>`.

A request is a JSON line {"argv", "env", "cwd"}; the replies are {"pid"} once the child
is forked, then {"exit"} (its exit status, minus the signal's number where a signal ended
it). The children write to this process's standard streams, which are the parent's.
Ctrl-C reaches the child and its parent, not this process; it ends when its parent
closes the requests."""

from __future__ import annotations

import atexit
import json
import os
import runpy
import signal
import sys
import threading
import traceback

import lightning  # noqa: F401  (the imports every child would repeat)
import rdkit.Chem  # noqa: F401
import torch  # noqa: F401

import oodmol.apps.train
import oodmol.training.run  # noqa: F401

TRAIN_APP = "oodmol.apps.train"


def run_child(request: dict, protocol: tuple[int, int]) -> None:
    """In the forked child: the request's environment, folder and arguments, then the
    app as its module's `__main__`; never returns."""
    for fd in protocol:
        os.close(fd)
    signal.signal(signal.SIGINT, signal.default_int_handler)
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
    with os.fdopen(requests, "r") as incoming, os.fdopen(replies, "w") as outgoing:
        for line in incoming:
            pid = os.fork()
            if pid == 0:
                run_child(json.loads(line), (requests, replies))
            outgoing.write(json.dumps({"pid": pid}) + "\n")
            outgoing.flush()
            _, status = os.waitpid(pid, 0)
            outgoing.write(json.dumps({"exit": os.waitstatus_to_exitcode(status)}) + "\n")
            outgoing.flush()


if __name__ == "__main__":
    serve(int(sys.argv[1]), int(sys.argv[2]))
