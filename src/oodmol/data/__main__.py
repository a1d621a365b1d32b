"""`python -m oodmol.data <command> ...`: `oodmol data <command> ...`."""

import sys

from oodmol.cli import main

sys.exit(main(["data", *sys.argv[1:]]))
