"""`python -m oodmol.report <runs> --out <dir>`: `oodmol report <runs> --out <dir>`."""

import sys

from oodmol.cli import main

sys.exit(main(["report", *sys.argv[1:]]))
