"""Shared fixtures: an isolated data dir, the offline source dir, and small CSV files."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
import torch

from oodmol.data.sources.fetch import SOURCE_DIR_ENV


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh cache folder, also exported as OODMOL_DATA_DIR for code that reads it."""
    folder = tmp_path / "data"
    folder.mkdir()
    monkeypatch.setenv("OODMOL_DATA_DIR", str(folder))
    return folder


@pytest.fixture(scope="session")
def source_dir() -> Path:
    """The offline copies of the public data sets (OODMOL_SOURCE_DIR), or a skip."""
    value = os.environ.get(SOURCE_DIR_ENV)
    if not value:
        pytest.skip(f"{SOURCE_DIR_ENV} is not set: no offline copy of the public data sets")
    return Path(value)


MakeCSV = Callable[[str, str, Sequence[str]], Path]


@pytest.fixture
def make_csv(tmp_path: Path) -> MakeCSV:
    """`make_csv(name, header, rows)` writes tmp_path/name verbatim, one row per line,
    so row k (0-based) is on line k + 2: CSVSource's mol id k."""

    def write(name: str, header: str, rows: Sequence[str]) -> Path:
        path = tmp_path / name
        path.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
        return path

    return write


@pytest.fixture
def float64() -> Iterator[None]:
    """float64 as torch's default dtype for one test: the reference implementations our
    models are held to create some of their constants and zero tensors in it."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(default)


@pytest.fixture
def one_thread() -> Iterator[None]:
    """One torch thread for tests of tiny tensors: a second thread only adds
    synchronisation, and on a busy machine each parallel scatter can wait for a core."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
