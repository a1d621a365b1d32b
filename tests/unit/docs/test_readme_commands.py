"""The README's train.py commands are runnable as written: each one's overrides compose
and pass the checks train.py makes before it runs (keys, choices, values, sweeps)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from oodmol.overrides import check_overrides

README = Path(__file__).resolve().parents[3] / "README.md"


def readme_train_commands() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    lines = [line.split("#", 1)[0].strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if line.startswith("python train.py") and "<" not in line]


def test_the_readme_shows_train_commands() -> None:
    assert len(readme_train_commands()) >= 5


@pytest.mark.parametrize("command", readme_train_commands())
def test_a_readme_train_command_composes(command: str) -> None:
    overrides = [word for word in shlex.split(command)[2:] if word != "-m"]
    check_overrides("train", overrides)
