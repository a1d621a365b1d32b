"""A command run in a private mount namespace (`unshare --map-root-user --mount`, which
needs no root): a folder made read-only, or a small tmpfs that fills up, as that command
alone sees them. `namespace_problem` says why the system does not allow it, if it does
not (the tests are then skipped)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from e2e_helpers import Result
from paths import REPO

UNSHARE = ["unshare", "--map-root-user", "--mount"]


def read_only(folder: Path) -> str:
    """The shell commands that make `folder` read-only (a read-only bind mount of itself)."""
    where = shlex.quote(str(folder))
    return f"mount --bind {where} {where} && mount -o remount,bind,ro {where}"


def small_disk(folder: Path, size: str) -> str:
    """The shell command that mounts a tmpfs of `size` (e.g. "600k") on `folder`."""
    return f"mount -t tmpfs -o size={size} tmpfs {shlex.quote(str(folder))}"


def namespace_problem(folder: Path) -> str | None:
    """Why `folder` cannot be mounted over in a private mount namespace here, or None."""
    if shutil.which("unshare") is None:
        return "no `unshare` command (util-linux)"
    probe = subprocess.run(
        [*UNSHARE, "sh", "-c", small_disk(folder, "64k")], capture_output=True, text=True
    )
    if probe.returncode != 0:
        return f"cannot mount in a private mount namespace: {probe.stderr.strip()}"
    return None


def run_with_mounts(
    mounts: Sequence[str], command: Sequence[str], env: dict[str, str], timeout: float = 480
) -> Result:
    """`python <command...>` in the repository root, after `mounts` (shell commands) in
    a mount namespace of its own."""
    script = " && ".join([*mounts, 'exec "$@"'])
    args = [*UNSHARE, "sh", "-c", script, "sh", sys.executable, *command]
    started = time.monotonic()
    done = subprocess.run(
        args, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    seconds = time.monotonic() - started
    return Result(args, done.returncode, done.stdout, done.stderr, seconds, started)
