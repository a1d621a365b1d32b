"""`python -m namespace_runs <plan.json>`: the steps of a plan, one after another, in
the process's own mount namespace (the full-disk fault of tests/e2e/test_run_faults.py,
whose tmpfs only that namespace sees). A run step is train.py's run forked from oodmol's
training fork server (`oodmol.training.child`, which a test holds to a fresh
interpreter's run), its terminal output in <name>.log and exit status in <name>.rc; a
copy step copies a folder out, a remove step removes a file."""

import json
import os
import shutil
import sys
from pathlib import Path

from oodmol.training.child import start_train


def run_step(step: dict) -> None:
    saved = dict(os.environ)
    os.environ.update(step["env"])
    try:
        log = Path(step["log"])
        code = start_train(step["argv"], log=log).wait()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    Path(step["rc"]).write_text(f"{code}\n")


if __name__ == "__main__":
    for step in json.loads(Path(sys.argv[1]).read_text()):
        if step["kind"] == "run":
            run_step(step)
        elif step["kind"] == "copy":
            shutil.copytree(step["from"], step["to"], symlinks=True)
        else:
            os.remove(step["path"])
