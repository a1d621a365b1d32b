"""The `oodmol` command: every subcommand in this package, each registered once in
`registry` with its one-line help, the dispatch and the help read from there.

- `registry`: the commands, `oodmol --help` and every group's `--help` written from it.
- `dispatch`: `main`, the console script `oodmol` (and `python -m oodmol.cli`).
- `entry`: what every tool's `main` shares: its door and an argument parser.
- one module per tool: `data`, `report`, `reproduce`, `llm`, `pretrain`, `uq`,
  `ablation`, `campaign`; the Hydra applications (`train`, `evaluate`, `predict`) are
  `oodmol.apps`'.

The work a command does lives in the packages below it (`oodmol.data`, `oodmol.report`,
...); nothing imports this package.
"""

from oodmol.cli.dispatch import main

__all__ = ["main"]
