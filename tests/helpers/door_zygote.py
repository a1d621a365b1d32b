"""The zygote of `door_helpers.Doors`: imports oodmol's entry points once, then for each
request (a JSON line on stdin) forks a child that runs one command line as its process
would, and answers with the child's exit status (a JSON line on stdout)."""

import json
import os
import runpy
import signal
import sys
import time
import traceback

import lightning  # noqa: F401  (the seconds a fork saves)
import rdkit.Chem  # noqa: F401
import torch  # noqa: F401

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


def child(request):
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
    app = OODMOL.get(argv[1]) if argv[0] == "oodmol" and len(argv) > 1 else None
    code = 0
    try:
        if isinstance(app, HydraApp):
            sys.argv = ["-m", *argv[2:]]  # what `oodmol <app>` execs: python -m <app's module>
            runpy.run_module(app.module, run_name="__main__", alter_sys=True)
        elif argv[0] == "oodmol":
            sys.argv = argv
            code = oodmol.cli.main(argv[1:])
        else:
            sys.argv = argv
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)


for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        child(request)
    deadline = time.monotonic() + request["timeout"]
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            status = -1
            break
        time.sleep(0.02)
    code = -1 if status == -1 else os.waitstatus_to_exitcode(status)
    print(json.dumps({"returncode": code, "timed_out": status == -1}), flush=True)
