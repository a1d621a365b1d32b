"""Shared fixtures (an isolated data dir, the offline source dir, small CSV files) and the
test tiers: what is slow is decided by where a test lives and what it does, not by a list
someone keeps."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
import torch

from oodmol.data.sources.fetch import SOURCE_DIR_ENV

# A suite started in the background of a non-interactive shell (`make test &`) inherits
# an ignored SIGINT, which oodmol's processes rightly keep ignoring; the tests that stop
# a build as Ctrl-C does need it delivered, here and in the processes they start.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


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


E2E = Path(__file__).resolve().parent / "e2e"
ALONE = Path(__file__).resolve().parent / "alone"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test of tests/e2e (they train, or run command lines) is slow: `make
    test-fast` (`-m "not slow"`) leaves them out. Every test of tests/alone measures the
    memory its process takes, which the tests before it in a worker would disturb: `alone`,
    which `make test` runs in a process of its own that collects that folder only."""
    for item in items:
        folders = Path(item.path).resolve().parents
        if E2E in folders:
            item.add_marker(pytest.mark.slow)
        if ALONE in folders:
            item.add_marker(pytest.mark.alone)


@pytest.fixture(autouse=True)
def _fast_tests_start_no_interpreter(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A test that is not slow may not start a Python process: one that does runs a
    program end to end, which belongs in tests/e2e (or is marked slow where it is)."""
    if request.node.get_closest_marker("slow"):
        return
    start = subprocess.Popen.__init__

    def refuse_python(self, args, *rest, **options) -> None:
        program = args[0] if isinstance(args, list | tuple) else str(args).split()[0]
        if str(program) == sys.executable or Path(str(program)).name.startswith("python"):
            pytest.fail(
                f"{request.node.nodeid} starts a Python process ({program}): a slow test; "
                "move it to tests/e2e or mark it @pytest.mark.slow"
            )
        start(self, args, *rest, **options)

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse_python)
