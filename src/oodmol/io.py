"""Atomic file writes: a reader never sees half a file, a killed writer leaves no debris
that could be mistaken for a finished one, and a write that fails (a full disk, a quota)
leaves the previous file as it was.

A file is written to a temporary sibling in the same folder, flushed and fsynced, renamed
over the old one, and the folder is fsynced, so that after a crash the folder holds the
old file or the new one, whole. A failed write removes its temporary file before the
error goes on, which gives its space back: the caller can still record what happened.

Every file and folder is created the way `open` and `mkdir` create them (0o666 and 0o777,
less the umask, or as a default ACL says), never private like `tempfile`'s (0o600 and
0o700): results and caches on a shared disk stay readable, and with umask 002 writable,
by the group.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path

# the errors of a write that needs more room than the disk (or the user's quota) has
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def is_disk_full(error: BaseException) -> bool:
    """Whether `error` is a write refused for want of space: no space left on the device,
    or the disk quota exceeded."""
    return isinstance(error, OSError) and error.errno in DISK_FULL


def file_digest(path: Path, algorithm: str) -> str:
    """The hex digest of a file's content (hashlib's `algorithm`), read in blocks."""
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def atomic_write_bytes(path: Path, data: bytes | memoryview) -> None:
    """Replace `path` with `data` (bytes, or a memoryview such as a BytesIO's
    `getbuffer()`, which is not copied). An OSError names `path`, not the temporary
    file, whichever step failed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp: Path | None = None
    try:
        fd, tmp = _new_sibling_file(path)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as error:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        if isinstance(error, OSError):
            error.filename = str(path)
        raise
    fsync_folder(path.parent)


def fsync_folder(folder: Path) -> None:
    """Make a rename or a new file in `folder` durable: fsync the folder itself. File
    systems that cannot fsync a folder (EINVAL) keep their own ordering."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError as error:
        if error.errno != errno.EINVAL:
            raise
    finally:
        os.close(fd)


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
