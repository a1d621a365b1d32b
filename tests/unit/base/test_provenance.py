"""The commit recorded beside each run's metrics (`versions.oodmol_commit`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from oodmol.provenance import source_commit


def git(repo: Path, *args: str) -> str:
    identity = ["-c", "user.name=t", "-c", "user.email=t@t"]
    return subprocess.run(
        ["git", *identity, *args], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_commit_of_a_clean_and_of_a_changed_checkout(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    (tmp_path / "model.py").write_text("a = 1\n")
    git(tmp_path, "add", "model.py")
    git(tmp_path, "commit", "-qm", "first")
    head = git(tmp_path, "rev-parse", "HEAD")
    assert source_commit(tmp_path) == head
    (tmp_path / "notes.txt").write_text("untracked files do not change the code\n")
    assert source_commit(tmp_path) == head
    (tmp_path / "model.py").write_text("a = 2\n")
    assert source_commit(tmp_path) == head + "+dirty"


def test_outside_a_checkout_the_commit_is_unknown(tmp_path: Path) -> None:
    assert source_commit(tmp_path) == "unknown"
