"""The zygote of `door_helpers.Doors`: imports oodmol's entry points once, then for each
request (a JSON line on stdin) forks a child that runs one command line as its process
would, and answers with the child's exit status (a JSON line on stdout, with the
request's id: children run side by side and end in any order)."""

import atexit
import json
import os
import runpy
import select
import signal
import sys
import threading
import time
import traceback

import lightning  # noqa: F401  (the seconds a fork saves)
import rdkit.Chem  # noqa: F401
import torch  # noqa: F401
import torch_geometric  # noqa: F401  (and numba, which it loads: what every run imports)

import oodmol.apps.evaluate
import oodmol.apps.predict
import oodmol.apps.train
import oodmol.benchmark
import oodmol.cli
import oodmol.cli.data
import oodmol.cli.report
import oodmol.inference.predict
import oodmol.inference.rescore
import oodmol.training.run
from oodmol.cli.registry import OODMOL, HydraApp

ZYGOTE_PATH = list(sys.path)  # [this folder, $PYTHONPATH..., the installation's]
STARTED_WITH = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]


def import_path(argv: list[str]) -> list[str]:
    """sys.path as the interpreter starts it for `argv`: the script's folder (the working
    folder for -m, the console script's for `oodmol`), the child's $PYTHONPATH, then
    the installation's."""
    if argv[0] == "oodmol":
        first = os.path.dirname(sys.executable)
    elif argv[0] == "-m":
        first = os.getcwd()
    else:
        first = os.path.dirname(os.path.abspath(argv[0]))
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    installed = ZYGOTE_PATH[1 + len(STARTED_WITH) :]
    return [first, *(os.path.abspath(p) for p in extra), *installed]


def child(request):
    stdin = os.open(os.devnull, os.O_RDONLY)  # the requests are the zygote's, not the run's
    os.dup2(stdin, 0)
    os.close(stdin)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for fd, name in ((1, "stdout"), (2, "stderr")):
        out = os.open(request[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, fd)
        os.close(out)
    # the streams stay open for the child's life, which os._exit ends
    sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
    argv = request["argv"]
    sys.path[:] = import_path(argv)
    app = OODMOL.get(argv[1]) if argv[0] == "oodmol" and len(argv) > 1 else None
    code = 0
    try:
        if isinstance(app, HydraApp):
            sys.argv = ["-m", *argv[2:]]  # what `oodmol <app>` execs: python -m <app's module>
            runpy.run_module(app.module, run_name="__main__", alter_sys=True)
        elif argv[0] == "oodmol":
            sys.argv = argv
            code = oodmol.cli.main(argv[1:])
        elif argv[0] == "-m":  # python -m <module> ...
            sys.argv = ["-m", *argv[2:]]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = argv
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:
        traceback.print_exc()
        code = 1
    # what the interpreter runs at its end, in its order: the threads' exit hooks (a
    # worker pool's shutdown: joblib's loky workers would wait out their idle timeout),
    # then the atexit handlers (a sweep's summary)
    threading._shutdown()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)


def serve() -> None:
    """Fork a child per request line as it arrives; answer each when its child ends
    (in the order they end), a child past its timeout killed."""
    running: dict[int, tuple[int, float]] = {}  # pid -> (request id, deadline)
    pending, reading = b"", True
    while reading or running:
        if reading and select.select([0], [], [], 0.02)[0]:
            chunk = os.read(0, 1 << 16)
            reading = bool(chunk)
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                request = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    child(request)
                running[pid] = (request["id"], time.monotonic() + request["timeout"])
        elif not reading:
            time.sleep(0.02)
        for pid, (number, deadline) in list(running.items()):
            done, status = os.waitpid(pid, os.WNOHANG)
            timed_out = not done and time.monotonic() > deadline
            if timed_out:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            if done or timed_out:
                del running[pid]
                code = -1 if timed_out else os.waitstatus_to_exitcode(status)
                reply = {"id": number, "returncode": code, "timed_out": timed_out}
                os.write(1, (json.dumps(reply) + "\n").encode())


serve()
