"""The locks of oodmol's folders: a cache's build lock, and a run folder's lock.

A cache's build lock is taken only when something must be built. Every cache (data set
table, split file, feature store) is first checked without a lock and without writing
anything, so a complete cache on a read-only disk (a shared copy, a read-only mount)
opens as it is. Only a missing or damaged cache takes the lock, and the caller checks
again under it: another process may have built it meanwhile.

A run folder's lock is held by the process that trains into it, from before it reads the
folder until the run ends, and refuses a second process at once (`FolderInUse`): two runs
in one folder would interleave their logs and overwrite each other's checkpoints. It is
the operating system's lock on an open file (`flock`), which ends with its process
however that ends, so the file a killed run leaves behind blocks no one.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from filelock import FileLock, Timeout

from oodmol.errors import UserError

log = logging.getLogger(__name__)
_DENIED = (errno.EACCES, errno.EPERM, errno.EROFS)
# How long a run folder's lock is tried before another holder refuses the run: a reader
# asking whether the folder is held (`holder_of`) holds it for an instant.
OBSERVER_GRACE = 0.5  # seconds


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
        "`oodmol data prepare task=<task> split=<split>` run by the folder's "
        "owner), or set OODMOL_DATA_DIR (paths.data_dir) to a folder you can write to."
    )


class FolderInUse(UserError):
    """Another process holds the folder's lock: it is training into that folder now."""

    @classmethod
    def held_by(cls, folder: Path, holder: str) -> FolderInUse:
        return cls(
            f"{folder} is in use by another run, training into it now ({holder}): refusing "
            "to run into it at the same time. Wait for that run to end, or choose another "
            "hydra.run.dir."
        )


class FolderLock:
    """The lock of `folder` (its file `name`), taken when made, released by `release`
    or at the end of a `with` block, or when the process ends.

    The holder writes its pid and host into the lock file, so that a refused process can
    say who holds the folder; a holder that could not write them (a full disk) still
    holds the lock."""

    def __init__(self, folder: Path, name: str) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = self.folder / name
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            held = _lock_within(self._fd, OBSERVER_GRACE)
        except BaseException:
            self.release()
            raise
        if not held:
            holder = _read_holder(self._fd)
            self.release()
            raise FolderInUse.held_by(self.folder, holder)
        with suppress(OSError):
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)

    def release(self) -> None:
        if self._fd is not None:
            # unlocked explicitly: a forked worker may still hold a copy of the descriptor
            with suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> FolderLock:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def _lock_within(fd: int, seconds: float) -> bool:
    """Take `fd`'s exclusive lock, trying again for up to `seconds`; whether it was taken."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)


def holder_of(folder: Path, name: str) -> str | None:
    """Who holds the lock of `folder` now ("pid N on host", or "pid unknown"), or None
    where nobody does (no lock file, or one that no process holds). It asks by taking a
    shared lock for an instant, which a run starting then waits out (`OBSERVER_GRACE`)."""
    try:
        fd = os.open(Path(folder) / name, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _read_holder(fd)
    except OSError:
        return None
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _read_holder(fd: int) -> str:
    """What the holder wrote into the lock file ("pid N on host"), or that it is not
    known (the holder has not written it yet, or could not)."""
    with suppress(OSError):
        text = os.pread(fd, 200, 0).decode(errors="replace").strip()
        if text.startswith("pid "):
            return text
    return "pid unknown"
