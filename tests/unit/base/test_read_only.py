"""Caches on a read-only disk: complete ones open without a lock or a write; a damaged
one fails with a message that says what is damaged, that the folder is read-only, and
what to do, not with a PermissionError from deep inside a writer."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import filelock
import pytest
from cache_helpers import load_all, tree, write_csv

from oodmol.locks import ReadOnlyCacheError

NOBODY = 65534


def set_writable(folder: Path, writable: bool) -> None:
    """chmod -R u+w or a-w (root ignores it; the lock spy below does not)."""
    for path in [folder, *folder.rglob("*")]:
        mode = path.lstat().st_mode
        path.chmod(mode | stat.S_IWUSR if writable else mode & ~0o222)


def test_complete_caches_open_without_lock_or_write(tmp_path: Path, monkeypatch) -> None:
    csv, data_dir = write_csv(tmp_path / "tiny.csv"), tmp_path / "data"
    built = load_all(csv, data_dir)
    taken: list[str] = []

    def spy(self: filelock.FileLock, *args, **kwargs) -> None:
        taken.append(self.lock_file)
        raise AssertionError(f"a complete cache took the lock {self.lock_file}")

    monkeypatch.setattr(filelock.FileLock, "acquire", spy)
    set_writable(data_dir, False)
    try:
        before = tree(data_dir)
        assert load_all(csv, data_dir) == built
        assert tree(data_dir) == before
    finally:
        set_writable(data_dir, True)
    assert taken == []


# ---------------------------------------------------------------- real permissions


@pytest.fixture(scope="module")
def shared_copy() -> Iterator[tuple[Path, Path]]:
    """A CSV file and its three caches, built with umask 022 in a world-readable folder
    (pytest's tmp_path base is 0700): another user can read them but not write."""
    previous = os.umask(0o022)
    base = Path(tempfile.mkdtemp(prefix="oodmol-read-only-"))
    try:
        base.chmod(0o755)
        csv = write_csv(base / "tiny.csv")
        load_all(csv, base / "pristine")
        yield csv, base / "pristine"
    finally:
        os.umask(previous)
        set_writable(base, True)
        shutil.rmtree(base)


def _garble_table(data_dir: Path) -> None:
    (meta,) = (data_dir / "tables").glob("*/meta.json")
    meta.write_text('{"key": ')


def _truncate_split(data_dir: Path) -> None:
    (path,) = (data_dir / "splits").rglob("*.json")
    path.write_text(path.read_text()[:40])


def _truncate_features(data_dir: Path) -> None:
    (path,) = (data_dir / "features").glob("*.lmdb")
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 2)


def _load_as_reader(conn, csv: Path, data_dir: Path) -> None:
    """In a forked child (the interpreter itself may be unreadable by nobody): become
    a user who may only read `data_dir`, load the caches and report how it went."""
    try:
        if os.geteuid() == 0:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
        conn.send(("ok", load_all(csv, data_dir)))
    except PermissionError as error:
        if os.geteuid() == 0:
            conn.send(("skip", f"cannot become uid {NOBODY} (nobody): {error}"))
        else:
            conn.send(("error", type(error).__name__, str(error)))
    except Exception as error:
        conn.send(("error", type(error).__name__, str(error)))


def load_read_only(csv: Path, data_dir: Path) -> tuple:
    """`load_all` by a process that may not write to `data_dir`: as nobody when the
    tests run as root, else after chmod -R a-w."""
    if not hasattr(os, "geteuid") or "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("needs POSIX users and fork to run a reader without write permission")
    if os.geteuid() != 0:
        set_writable(data_dir, False)
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_load_as_reader, args=(send, csv, data_dir))
    child.start()
    try:
        if not receive.poll(120):
            pytest.fail("the read-only loader hung")
        result = receive.recv()
    finally:
        child.join(10)
        child.kill()
        set_writable(data_dir, True)
    if result[0] == "skip":
        pytest.skip(result[1])
    return result


@pytest.mark.parametrize(
    "damage, what",
    [
        (None, None),
        (_garble_table, "data set cache"),
        (_truncate_split, "split file"),
        (_truncate_features, "feature cache"),
    ],
    ids=["intact", "table", "split", "features"],
)
def test_reader_without_write_permission(
    shared_copy: tuple[Path, Path], damage: Callable[[Path], None] | None, what: str | None
) -> None:
    """An intact copy loads and is left exactly as it was; a damaged cache in it is
    named, with the folder that may not be written and what to do."""
    csv, pristine = shared_copy
    data_dir = pristine.with_name(f"copy-{what or 'intact'}".replace(" ", "-"))
    shutil.copytree(pristine, data_dir)
    if damage is not None:
        damage(data_dir)
    before = tree(data_dir)
    result = load_read_only(csv, data_dir)
    assert tree(data_dir) == before
    if damage is None:
        assert result == ("ok", load_all(csv, pristine))
        return
    status, kind, message = result
    assert (status, kind) == ("error", ReadOnlyCacheError.__name__), message
    assert message.startswith(what), message
    assert "cannot build it" in message and "Permission denied" in message
    assert str(data_dir) in message and "OODMOL_DATA_DIR" in message
