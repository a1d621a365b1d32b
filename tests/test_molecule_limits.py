"""No molecule can take a run down with it: per-molecule work runs in supervised worker
processes, where a molecule that crashes its worker or overruns its time limit is
refused with the reason and the rest go on."""

from __future__ import annotations

import ctypes
import faulthandler
import os
import signal
import threading
import time
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from oodmol.data.featurize.base import Featurizer, MolInput
from oodmol.data.store import FeatureStore
from oodmol.data.table import MoleculeTable
from oodmol.parallel import Refused, process_map

CRASHES = {
    "segfault": lambda: ctypes.string_at(0),
    "abort": os.abort,
    "oom_kill": lambda: os.kill(os.getpid(), signal.SIGKILL),  # as the OOM killer ends it
}
REASONS = {
    "segfault": "its worker process died of SIGSEGV",
    "abort": "its worker process died of SIGABRT",
    "oom_kill": "its worker process died of SIGKILL (out of memory?)",
}


def supervised(fn, items: list, **kwargs) -> list:
    return list(process_map(fn, items, len(items), "test", progress=False, **kwargs))


def square(x: int) -> int:
    return x * x


def pid_or_crash(x: int, crash: str = "segfault") -> int:
    if x == 7:
        faulthandler.disable()  # pytest's: its dump of this worker's stack is only noise
        CRASHES[crash]()
    return os.getpid()


def sleepy(x: int) -> int:
    if x == 3:
        time.sleep(60)
    return os.getpid()


def fails_at_five(x: int) -> int:
    if x == 5:
        raise ValueError("five is not allowed")
    return x


def unsendable(x: int) -> threading.Lock:
    return threading.Lock()  # does not pickle: the worker dies sending it back


def gone(pids: set[int]) -> bool:
    """No process of these ids is left (the workers were ended and waited for)."""
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        return False
    return True


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_supervised_map_equals_map_in_order(n_jobs: int) -> None:
    items = list(range(500))
    assert supervised(square, items, n_jobs=n_jobs) == list(map(square, items))


def test_an_exception_of_fn_is_raised_at_its_place() -> None:
    seen = []
    with pytest.raises(ValueError, match="five is not allowed"):
        for result in process_map(fails_at_five, range(20), 20, "", n_jobs=2, progress=False):
            seen.append(result)
    assert seen == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("crash", sorted(CRASHES))
@pytest.mark.parametrize("n_jobs", [1, 2])
def test_a_crashing_item_is_named_and_the_rest_come_back(crash: str, n_jobs: int) -> None:
    results = supervised(partial(pid_or_crash, crash=crash), list(range(40)), n_jobs=n_jobs)
    assert results[7] == Refused(REASONS[crash])
    pids = set(results[:7] + results[8:])
    assert all(isinstance(pid, int) and pid != os.getpid() for pid in pids)
    assert gone(pids)


def test_an_item_past_its_time_limit_is_refused_and_its_worker_ended() -> None:
    started = time.monotonic()
    results = supervised(sleepy, list(range(12)), n_jobs=2, time_limit=0.5)
    assert time.monotonic() - started < 10
    assert results[3] == Refused("time limit of 0.5 s exceeded")
    pids = set(results[:3] + results[4:])
    assert all(isinstance(pid, int) for pid in pids)
    assert gone(pids)


def test_workers_that_cannot_answer_end_the_run() -> None:
    """A worker that dies outside any item is replaced, but not forever."""
    with pytest.raises(RuntimeError, match="worker processes in a row ended outside any item"):
        supervised(unsendable, [1, 2, 3])


def test_a_map_left_early_leaves_no_worker() -> None:
    results = process_map(pid_or_crash, range(100), 100, "", n_jobs=2, progress=False)
    pids = {next(results) for _ in range(3)}
    results.close()
    assert gone(pids)


class Crashing(Featurizer):
    """Morgan-like output, but a segfault on one SMILES and a stall on another."""

    name = "crashing"

    def __init__(self, time_limit: float | None = None) -> None:
        self.time_limit = time_limit

    def params(self) -> dict:
        return {"time_limit": self.time_limit}

    def __call__(self, mol: MolInput) -> dict[str, np.ndarray]:
        if mol.smiles == "C[Si]":
            faulthandler.disable()
            ctypes.string_at(0)
        if mol.smiles == "CC[Si]":
            time.sleep(60)
        return {"x": np.array([len(mol.smiles)], dtype=np.float32)}


def test_feature_cache_records_crashes_and_overruns_and_keeps_the_rest(tmp_path: Path) -> None:
    smiles = ["C", "C[Si]", "CC", "CC[Si]", "CCC", "CCCC"]
    table = MoleculeTable("t", np.arange(10, 16), np.array(smiles), {})
    store = FeatureStore.build_or_open(Crashing(time_limit=0.5), table, tmp_path, progress=False)
    assert store.failed == {
        11: "C[Si]: its worker process died of SIGSEGV",
        13: "CC[Si]: time limit of 0.5 s exceeded",
    }
    assert len(store) == 4
    np.testing.assert_array_equal(store.matrix([10, 12, 14, 15]).ravel(), [1, 2, 3, 4])
