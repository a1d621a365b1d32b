"""What every `oodmol` tool shares on its command line: the door its `main` runs through
(`entry_point`: one message and an exit status for a user error, `--debug` for the
traceback) and an argument parser whose usage errors are user errors like any other."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from oodmol.errors import UsageError, door, without_debug_flag

Main = Callable[[list[str]], int | None]


class ToolParser(argparse.ArgumentParser):
    """argparse, but a usage error raises `UsageError` (one line, exit 2, through the
    tool's door) instead of printing the whole usage and exiting by itself."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


def entry_point(
    program: str, usage: str | None = None
) -> Callable[[Main], Callable[[Sequence[str] | None], int]]:
    """`@entry_point("oodmol report")` over `main(argv) -> status` makes the tool's entry:
    argv defaults to the process's arguments, `--debug` is taken out of them, and the
    work runs through `oodmol.errors.door`. A tool that parses its arguments without
    argparse gives its `usage` (its docstring), printed for `-h` or `--help` first."""

    def wrap(main: Main) -> Callable[[Sequence[str] | None], int]:
        @functools.wraps(main)
        def entry(argv: Sequence[str] | None = None) -> int:
            args = without_debug_flag(sys.argv[1:] if argv is None else argv)
            if usage is not None and args[:1] in (["-h"], ["--help"]):
                return door(program, lambda: print(usage))
            return door(program, lambda: main(args))

        return entry

    return wrap
