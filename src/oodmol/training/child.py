"""Training runs in a child process, as `oodmol train` would run them: for the tools that
train many runs one after another (campaigns, the transfer study, reproduction), each
run gets a fresh interpreter, so one run's state (Hydra's, torch's threads, a crash)
never reaches the next."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence

TRAIN_APP = "oodmol.apps.train"  # the module `oodmol train` runs


def run_train(overrides: Sequence[str]) -> int:
    """Run train.py with `overrides` in a child process of this interpreter; its exit
    status."""
    return subprocess.run([sys.executable, "-m", TRAIN_APP, *overrides], check=False).returncode
