"""`oodmol <command> ...`: the registry's groups are walked word by word down to the
command, whose arguments pass to it unchanged; a group's `--help` is written from the
registry, a command's own `--help` is its own."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Sequence

from oodmol.cli.registry import OODMOL, Group, HydraApp, Tool
from oodmol.errors import UsageError, door

HELP_FLAGS = ("-h", "--help")


def main(argv: Sequence[str] | None = None) -> int:
    """Run `oodmol` with `argv` (the process's arguments by default); its exit status."""
    words = list(sys.argv[1:] if argv is None else argv)
    group, program = OODMOL, OODMOL.name
    while True:
        if words[:1] and words[0] in HELP_FLAGS:
            print(help_text(group, program))
            return 0
        command = group.get(words[0]) if words else None
        if command is None:
            return door(program, functools.partial(_refuse, group, program, words[:1]))
        program, words = f"{program} {command.name}", words[1:]
        if isinstance(command, HydraApp):
            os.execv(sys.executable, [sys.executable, "-m", command.module, *words])
        if isinstance(command, Tool):
            return command.load()(words)
        group = command


def _refuse(group: Group, program: str, given: list[str]) -> None:
    names = ", ".join(command.name for command in group.commands)
    unknown = f"unknown command {given[0]!r}; " if given else ""
    raise UsageError(f"{unknown}give one of {names} (see {program} --help)")


def help_text(group: Group, program: str) -> str:
    """The usage of `program` (the group's words), one line per command below it."""
    leaves = [(" ".join([program, *words]), command.help) for words, command in group.leaves()]
    width = max(len(words) for words, _ in leaves) + 2
    lines = [f"  {words:<{width}}{text}" for words, text in leaves]
    return "\n".join(
        [
            f"usage: {program} <command> [arguments]",
            "",
            f"{program}: {group.help}",
            "",
            "commands:",
            *lines,
            "",
            f"`{program} <command> --help` gives a command's arguments. A user error ends in",
            "one message and exit status 2; --debug shows its traceback.",
        ]
    )
