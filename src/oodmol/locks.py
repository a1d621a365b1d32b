"""The build lock of a cache, taken only when something must be built.

Every cache (data set table, split file, feature store) is first checked without a lock
and without writing anything, so a complete cache on a read-only disk (a shared copy,
a read-only mount) opens as it is. Only a missing or damaged cache takes the lock, and
the caller checks again under it: another process may have built it meanwhile.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from oodmol.errors import UserError

log = logging.getLogger(__name__)
_DENIED = (errno.EACCES, errno.EPERM, errno.EROFS)


class ReadOnlyCacheError(UserError, PermissionError):
    """A cache must be built or repaired in a folder this process cannot write to."""


@contextmanager
def build_lock(lock_path: Path, problem: str) -> Iterator[None]:
    """Hold `lock_path` while building the cache beside it, after waiting for any other
    builder. `problem` says why a build is needed ("feature cache X is missing"); if the
    folder cannot be written to, that becomes a `ReadOnlyCacheError` saying what to do,
    not a PermissionError from deep inside a writer."""
    lock_path = Path(lock_path)
    folder = lock_path.parent
    lock = _acquire(lock_path, problem)
    try:
        yield
    except OSError as error:
        if _denied_inside(error, folder):
            raise _read_only(problem, folder, error) from error
        raise
    finally:
        lock.release()


def _acquire(lock_path: Path, problem: str) -> FileLock:
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(lock_path)  # no mode: the umask (or a default ACL) sets it
        try:
            lock.acquire(timeout=0)
        except Timeout:
            log.info("waiting for another process to finish building %s", lock_path.stem)
            lock.acquire()
    except OSError as error:
        if error.errno in _DENIED:
            raise _read_only(problem, lock_path.parent, error) from error
        raise
    return lock


def _denied_inside(error: OSError, folder: Path) -> bool:
    """Whether `error` is a refused write to something in `folder`."""
    if error.errno not in _DENIED or not error.filename:
        return False
    return Path(error.filename).resolve().is_relative_to(folder.resolve())


def _read_only(problem: str, folder: Path, error: OSError) -> ReadOnlyCacheError:
    return ReadOnlyCacheError(
        f"{problem}, and this process cannot build it: it may not write to {folder} "
        f"({error.strerror}). Build it once where that folder is writable (for example "
        "`python -m oodmol.data prepare task=<task> split=<split>` run by the folder's "
        "owner), or set OODMOL_DATA_DIR (paths.data_dir) to a folder you can write to."
    )
