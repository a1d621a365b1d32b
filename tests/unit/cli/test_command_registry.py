"""The `oodmol` command's help is its registry, and so is what runs: every registered
command answers `--help` with exit status 0, `oodmol --help` names every command a user
can run and nothing else, and a command the registry lacks is refused in one line with
exit status 2 (through the real entry point as well as in process)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
from paths import REPO

from oodmol.cli import main
from oodmol.cli.registry import OODMOL, Group, HydraApp, Tool

LEAVES = list(OODMOL.leaves())
TOOLS = [(words, c) for words, c in LEAVES if isinstance(c, Tool)]
APPS = [(words, c) for words, c in LEAVES if isinstance(c, HydraApp)]


def groups(group: Group = OODMOL, words: tuple[str, ...] = ()):
    yield words, group
    for command in group.commands:
        if isinstance(command, Group):
            yield from groups(command, (*words, command.name))


GROUPS = list(groups())


def name(words: tuple[str, ...]) -> str:
    return " ".join(words) or "oodmol"


def python_m(module: str, *args: str) -> subprocess.CompletedProcess:
    """`python -m <module> ...` in a fresh interpreter, on this checkout's code."""
    src = str(REPO / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def oodmol(*args: str) -> subprocess.CompletedProcess:
    """`oodmol ...` as its console script runs it."""
    return python_m("oodmol.cli", *args)


def listed(help_shown: str) -> list[tuple[str, str]]:
    """(command, help) of every line under `commands:` of a group's help."""
    block = help_shown.split("commands:\n", 1)[1].split("\n\n", 1)[0]
    rows = []
    for line in block.splitlines():
        words, text = line.strip().split("  ", 1)
        rows.append((words, text.strip()))
    return rows


def test_every_command_has_one_name_and_a_one_line_help() -> None:
    for _, group in GROUPS:
        names = [command.name for command in group.commands]
        assert len(names) == len(set(names)), f"{group.name}: a name registered twice"
        for command in group.commands:
            assert command.help and "\n" not in command.help, command.name
            assert not command.name.startswith("-"), command.name


def test_every_command_names_code_that_exists() -> None:
    for words, tool in TOOLS:
        assert callable(tool.load()), f"oodmol {name(words)}: {tool.main} is not a function"
    for words, app in APPS:
        assert importlib.util.find_spec(app.module), f"oodmol {name(words)}: no {app.module}"


@pytest.mark.parametrize(("words", "group"), GROUPS, ids=[name(w) for w, _ in GROUPS])
def test_a_groups_help_lists_exactly_its_commands(
    words: tuple[str, ...], group: Group, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*words, "--help"]) == 0
    shown = capsys.readouterr().out
    program = " ".join(["oodmol", *words])
    assert listed(shown) == [(" ".join([program, *w]), c.help) for w, c in group.leaves()]


@pytest.mark.parametrize(("words", "tool"), TOOLS, ids=[name(w) for w, _ in TOOLS])
def test_every_tool_answers_its_help(
    words: tuple[str, ...], tool: Tool, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*words, "--help"]) == 0
    assert f"oodmol {name(words)}" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "group"),
    [
        (["fly"], ()),
        ([], ()),
        (["data", "exprot", "task=x"], ("data",)),
        (["data"], ("data",)),
        (["ablation", "heatmap", "runs"], ("ablation",)),
        (["uq"], ("uq",)),
    ],
    ids=["unknown", "nothing", "data-unknown", "data-nothing", "ablation-unknown", "uq-nothing"],
)
def test_a_command_not_registered_is_refused_in_one_line(
    argv: list[str], group: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    shown = capsys.readouterr()
    assert shown.out == ""
    [line] = shown.err.splitlines()
    names = ", ".join(command.name for command in dict(GROUPS)[group].commands)
    assert f"give one of {names} (see oodmol{''.join(' ' + w for w in group)} --help)" in line


@pytest.mark.slow
def test_the_real_command_lists_and_refuses_as_registered() -> None:
    shown = oodmol("--help")
    assert shown.returncode == 0, shown.stderr
    assert [words for words, _ in listed(shown.stdout)] == [f"oodmol {name(w)}" for w, _ in LEAVES]
    refused = oodmol("fly", "model=mlp")
    assert refused.returncode == 2
    assert refused.stdout == ""
    assert refused.stderr.splitlines() == [
        "[oodmol] unknown command 'fly'; give one of "
        f"{', '.join(c.name for c in OODMOL.commands)} (see oodmol --help)"
    ]


@pytest.mark.slow
@pytest.mark.parametrize(("words", "app"), APPS, ids=[name(w) for w, _ in APPS])
def test_every_hydra_app_answers_its_help(words: tuple[str, ...], app: HydraApp) -> None:
    """The application's own (Hydra's) help, through the process `oodmol` becomes."""
    shown = oodmol(*words, "--help")
    assert shown.returncode == 0, shown.stderr
    assert "powered by Hydra" in shown.stdout
