"""Which code produced a result: package versions and the source commit, recorded in
every run's metrics.json so that a leaderboard can say which runs share code."""

from __future__ import annotations

import importlib.metadata
import platform
import subprocess
from pathlib import Path

PACKAGES = ("oodmol", "torch", "lightning", "rdkit", "scikit-learn", "numpy", "hydra-core")


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version(), "oodmol_commit": source_commit()}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def source_commit(where: Path = Path(__file__).parent) -> str:
    """The git commit of the code that ran, "+dirty" when tracked files differ from it,
    "unknown" outside a git checkout: one package version spans many commits, and a
    leaderboard should say which runs share code."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=where, capture_output=True, text=True, timeout=30, check=True
        ).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return commit + ("+dirty" if dirty else "")
