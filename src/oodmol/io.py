"""Atomic file writes: a reader never sees half a file, a killed writer leaves no debris
that could be mistaken for a finished one.

Every file and folder is created the way `open` and `mkdir` create them (0o666 and 0o777,
less the umask, or as a default ACL says), never private like `tempfile`'s (0o600 and
0o700): results and caches on a shared disk stay readable, and with umask 002 writable,
by the group.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _new_sibling_file(path)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def atomic_write_json(path: Path, obj: object) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True))


def atomic_write_dir(path: Path, fill: Callable[[Path], None]) -> None:
    """Build a directory in a temporary sibling with `fill`, then swap it into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _new_sibling_dir(path)
    try:
        fill(tmp)
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _temporary_sibling(path: Path) -> Path:
    """A hidden name beside `path`, ending in .tmp, that no finished file has."""
    return path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")


def _new_sibling_file(path: Path) -> tuple[int, Path]:
    """A new empty file beside `path`, open for writing, with the umask's mode."""
    while True:
        tmp = _temporary_sibling(path)
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue


def _new_sibling_dir(path: Path) -> Path:
    """A new empty folder beside `path`, with the umask's mode."""
    while True:
        tmp = _temporary_sibling(path)
        try:
            tmp.mkdir(mode=0o777)
            return tmp
        except FileExistsError:
            continue
