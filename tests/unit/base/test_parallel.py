"""`threads=N` bounds every part of a run: oodmol's worker pools, BLAS/OpenMP thread
pools and torch's intra-op threads."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from threadpoolctl import threadpool_info, threadpool_limits

from oodmol.data.featurize.fingerprints import MorganFingerprint
from oodmol.data.store import FeatureStore
from oodmol.data.table import MoleculeTable
from oodmol.data.validate import parse_all
from oodmol.parallel import (
    THREAD_VARIABLES,
    available_cores,
    limit_cores,
    limit_threads,
    start_method,
    worker_count,
)


@pytest.fixture
def one_core() -> Iterator[None]:
    limit_cores(1)
    yield
    limit_cores(None)


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The worker processes started, one entry each."""
    context = multiprocessing.get_context(start_method())
    process = context.Process
    starts: list[int] = []

    def counted(*args, **kwargs):
        starts.append(1)
        return process(*args, **kwargs)

    monkeypatch.setattr(context, "Process", counted)
    return starts


def test_cap_of_one_core_runs_one_worker_process(one_core, started, tmp_path: Path) -> None:
    """Featurisation and validation, each large enough to run across cores without a
    cap, run in one worker process each (this process only waits for it); an explicit
    n_jobs is capped too."""
    assert available_cores() == 1
    assert worker_count(None) == worker_count(8) == 1
    table = MoleculeTable("ethanol", np.arange(64), np.array(["CCO"] * 64), {"y": np.zeros(64)})
    fingerprint = MorganFingerprint(n_bits=64)
    assert len(FeatureStore.build_or_open(fingerprint, table, tmp_path, progress=False)) == 64
    assert len(started) == 1
    counts = MorganFingerprint(n_bits=64, counts=True)
    assert len(FeatureStore.build_or_open(counts, table, tmp_path, n_jobs=4, progress=False)) == 64
    assert len(started) == 2
    assert len(parse_all(["CCO"] * 5000, progress=False)) == 5000
    assert len(started) == 3


def test_without_a_cap_an_explicit_n_jobs_stands() -> None:
    assert worker_count(8) == 8


def test_limit_threads_bounds_every_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """Worker processes, loaded BLAS/OpenMP pools, torch, and (through the environment)
    libraries loaded later and child processes."""
    for name in THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)  # restored after the test
    threads = torch.get_num_threads()
    try:
        with threadpool_limits(limits=None):  # puts the BLAS/OpenMP pools back on exit
            limit_threads(1)
            assert available_cores() == 1
            assert torch.get_num_threads() == 1
            assert threadpool_info(), "no BLAS/OpenMP library is loaded to check"
            assert {pool["num_threads"] for pool in threadpool_info()} == {1}
            assert {os.environ[name] for name in THREAD_VARIABLES} == {"1"}
    finally:
        torch.set_num_threads(threads)
        limit_cores(None)
