"""Where the repository is, for tests at any depth of tests/."""

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# the PYTHONPATH of a process that loads this folder's callbacks (`+callbacks.x._target_=
# fault_helpers.…`) beside oodmol from the source tree
HELPERS_PYTHONPATH = os.pathsep.join([str(REPO / "src"), str(REPO / "tests" / "helpers")])
