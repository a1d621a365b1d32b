"""`python -m oodmol.cli`: the `oodmol` command without its console script."""

import sys

from oodmol.cli import main

sys.exit(main())
