"""Files and folders oodmol creates get the user's umask, as `open` and `mkdir` would give
them: with umask 002 a shared cluster disk's group can read and update results and
caches; nothing is private because a temporary file was."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from cache_helpers import load_all, write_csv
from fsspec.implementations.local import get_umask
from lightning.pytorch.plugins.io import TorchCheckpointIO

from oodmol.io import atomic_write_bytes, atomic_write_dir, atomic_write_json, atomic_write_text
from oodmol.training.checkpoint_io import AtomicCheckpointIO

Modes = tuple[int, int]  # (file, folder)


@pytest.fixture(params=[0o002, 0o022], ids=["umask002", "umask022"])
def modes(request: pytest.FixtureRequest) -> Iterator[Modes]:
    """Run under this umask (restored after); the modes new files and folders must get."""
    previous = os.umask(request.param)
    try:
        yield 0o666 & ~request.param, 0o777 & ~request.param
    finally:
        os.umask(previous)


def wrong_modes(folder: Path, expected: Modes) -> dict[str, str]:
    """Everything under `folder` whose mode is not the expected one, with its mode."""
    wrong = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(root, name)
            mode = stat.S_IMODE(path.lstat().st_mode)
            if mode != expected[path.is_dir()]:
                wrong[str(path.relative_to(folder))] = oct(mode)
    return wrong


def test_caches_and_their_locks(modes: Modes, tmp_path: Path) -> None:
    """The table cache folder and its files, the split file, the LMDB feature cache and
    its seal, and the lock files of all three."""
    data_dir = tmp_path / "data"
    load_all(write_csv(tmp_path / "tiny.csv"), data_dir)
    names = [p.name for p in data_dir.rglob("*")]
    for suffix in (".parquet", ".json", ".lmdb", ".seal", ".lock"):
        assert any(name.endswith(suffix) for name in names), f"no {suffix} file was made"
    assert wrong_modes(data_dir, modes) == {}


def test_atomic_writes(modes: Modes, tmp_path: Path) -> None:
    """metrics.json, predictions, split files and fetched sources all go through these."""
    out = tmp_path / "run" / "results"
    atomic_write_bytes(out / "raw.bin", b"\x00\x01")
    atomic_write_text(out / "predictions.csv", "mol_id,y\n1,2.0\n")
    atomic_write_json(out / "metrics.json", {"mae": 0.5})
    atomic_write_dir(out / "table", lambda tmp: (tmp / "part.txt").write_text("x"))
    atomic_write_dir(out / "table", lambda tmp: (tmp / "part.txt").write_text("y"))  # replace
    assert wrong_modes(tmp_path / "run", modes) == {}


def test_checkpoints(modes: Modes, tmp_path: Path) -> None:
    """A run saves its checkpoints through `AtomicCheckpointIO` (oodmol.io's temporary
    file); Lightning's own writer, which remote checkpoints still use, goes through
    fsspec, which writes a private temporary file and then applies the umask: a guard
    that it still does."""
    AtomicCheckpointIO().save_checkpoint({"w": torch.zeros(2)}, tmp_path / "ckpt" / "last.ckpt")
    get_umask.cache_clear()  # fsspec reads the umask once per process; this test changes it
    TorchCheckpointIO().save_checkpoint({"w": torch.zeros(2)}, tmp_path / "ckpt" / "best.ckpt")
    assert wrong_modes(tmp_path / "ckpt", modes) == {}
