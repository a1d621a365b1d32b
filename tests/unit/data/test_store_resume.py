"""Resumable feature caches: a build stopped part-way (killed, or failed) goes on from its
journal, and the cache it finally writes equals one built without a stop."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from oodmol.data import store as store_module
from oodmol.data.featurize.base import FeaturizationError, Featurizer, MolInput
from oodmol.data.featurize.graph3d import Graph3D
from oodmol.data.store import FeatureStore
from oodmol.data.table import MoleculeTable

SMILES = [f"{'C' * k}O" for k in range(1, 25)]
MOL_IDS = np.arange(100, 100 + len(SMILES))


def make_table() -> MoleculeTable:
    return MoleculeTable("t", MOL_IDS, np.array(SMILES), {"y": np.zeros(len(SMILES))})


class SlowFeaturizer(Featurizer):
    """Features from the SMILES alone; each call is logged (to count them across
    processes); `fail_at` raises an unexpected error on that SMILES (a crashed build);
    molecules of 13 carbons are refused with a reason (a journaled failure)."""

    name = "slow"

    def __init__(self, log_dir: str, delay: float = 0.0, fail_at: str | None = None) -> None:
        self.log_dir, self.delay, self.fail_at = log_dir, delay, fail_at

    def params(self) -> dict:
        return {"version": 1}  # delay and fail_at change no output

    def __call__(self, mol: MolInput) -> dict[str, np.ndarray]:
        with open(Path(self.log_dir) / f"{os.getpid()}.log", "a") as f:
            f.write(mol.smiles + "\n")
        time.sleep(self.delay)
        if mol.smiles == self.fail_at:
            raise RuntimeError("the machine went away")
        if mol.smiles.count("C") == 13:
            raise FeaturizationError("too many carbons")
        n = len(mol.smiles)
        return {"x": np.arange(n, dtype=np.float64), "pos": np.full((n, 3), n, np.float32)}


def calls(log_dir: Path) -> list[str]:
    return [line for lines in calls_per_process(log_dir).values() for line in lines]


def calls_per_process(log_dir: Path) -> dict[str, list[str]]:
    """Each process's calls, by its log's name (its pid)."""
    return {p.name: p.read_text().splitlines() for p in sorted(log_dir.glob("*.log"))}


def build(featurizer: Featurizer, cache: Path, n_jobs: int = 1) -> FeatureStore:
    return FeatureStore.build_or_open(
        featurizer, make_table(), cache, n_jobs=n_jobs, progress=False
    )


def contents(store: FeatureStore) -> tuple[dict, dict]:
    arrays = {}
    for mol_id in MOL_IDS.tolist():
        if mol_id not in store.failed:
            arrays[mol_id] = {k: v.tolist() for k, v in store.get(mol_id).items()}
    return arrays, store.failed


def build_stopped_at(tmp_path: Path, stop: int) -> tuple[Path, tuple[dict, dict], Path]:
    """The featurisers' call log, an uninterrupted build's contents, and a cache whose
    build stopped at molecule `stop` (its journal kept)."""
    log = tmp_path / "log"
    log.mkdir()
    full = contents(build(SlowFeaturizer(str(log)), tmp_path / "full"))
    cache = tmp_path / "cache"
    with pytest.raises(RuntimeError, match="the machine went away"):
        build(SlowFeaturizer(str(log), fail_at=SMILES[stop]), cache)
    return log, full, cache


@pytest.fixture
def often(monkeypatch):
    """A journal part after every molecule."""
    monkeypatch.setattr(store_module, "_JOURNAL_SECONDS", 0.0)


def _build_in_child(cache: str, log_dir: str) -> None:
    os.setpgid(0, 0)  # its workers with it: the whole build is killed at once
    build(SlowFeaturizer(log_dir, delay=0.05), Path(cache))


def test_killed_build_resumes_and_equals_an_uninterrupted_one(tmp_path, often, monkeypatch):
    # the child forked below starts its own workers: forked too (a fork server another
    # test started belongs to this process, not to the child)
    monkeypatch.setattr("oodmol.parallel.start_method", lambda: "fork")
    full_log, log = tmp_path / "full-log", tmp_path / "log"
    full_log.mkdir()
    log.mkdir()
    full = contents(build(SlowFeaturizer(str(full_log)), tmp_path / "full"))

    cache = tmp_path / "cache"
    child = multiprocessing.get_context("fork").Process(
        target=_build_in_child, args=(str(cache), str(log))
    )
    child.start()
    deadline = time.monotonic() + 60
    while len(list(cache.glob("*.journal/*.part"))) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    # no chance to clean up or flush, and no worker left to finish a molecule it had begun
    os.killpg(child.pid, signal.SIGKILL)
    child.join()
    parts = list(cache.glob("*.journal/*.part"))
    assert 5 <= len(parts) < len(SMILES), "the build was not stopped part-way"
    assert not list(cache.glob("*.lmdb.seal"))
    before = len(calls(log))

    resumed = build(SlowFeaturizer(str(log)), cache)

    assert contents(resumed) == full
    assert resumed.failed[112].endswith("too many carbons")  # a failure, with its reason
    redone = len(calls(log)) - before
    assert redone <= len(SMILES) - len(parts)  # the journal's molecules were not redone
    assert not list(cache.glob("*.journal"))  # sealed: the journal is gone
    assert len(list(cache.glob("*.lmdb"))) == 1


def test_failed_build_keeps_its_journal_and_the_next_one_resumes(tmp_path, often):
    log, full, cache = build_stopped_at(tmp_path, 10)
    assert len(list(cache.glob("*.journal/*.part"))) == 10
    first = len(calls(log))

    resumed = build(SlowFeaturizer(str(log)), cache, n_jobs=2)

    assert contents(resumed) == full
    assert len(calls(log)) - first == len(SMILES) - 10


def test_damaged_journal_part_is_ignored_and_its_molecules_redone(tmp_path, often, caplog):
    log, full, cache = build_stopped_at(tmp_path, 5)
    part = sorted(cache.glob("*.journal/*.part"))[2]
    raw = bytearray(part.read_bytes())
    raw[-1] ^= 0xFF
    part.write_bytes(bytes(raw))
    first = len(calls(log))

    resumed = build(SlowFeaturizer(str(log)), cache)

    assert contents(resumed) == full
    assert "ignoring damaged journal part" in caplog.text
    assert len(calls(log)) - first == len(SMILES) - 4


def test_journal_logs_progress_and_time_left(tmp_path, often, caplog):
    log = tmp_path / "log"
    log.mkdir()
    with caplog.at_level("INFO", logger="oodmol.data.store"):
        build(SlowFeaturizer(str(log)), tmp_path / "cache")
    progress = [r.getMessage() for r in caplog.records if "molecules done" in r.getMessage()]
    assert progress[-1].startswith(f"slow: {len(SMILES)} of {len(SMILES)} molecules done (1 ")
    assert "left" in progress[0]


def test_many_journal_parts_are_merged_into_one_when_read(tmp_path, often, monkeypatch):
    monkeypatch.setattr(store_module, "_JOURNAL_COMPACT", 4)
    log, full, cache = build_stopped_at(tmp_path, 8)
    (journal,) = cache.glob("*.journal")
    assert len(list(journal.glob("*.part"))) == 8
    found = store_module.Journal(journal, journal_key(cache)).read()
    assert len(found) == 8 and len(list(journal.glob("*.part"))) == 1  # merged
    assert store_module.Journal(journal, journal_key(cache)).read() == found
    first = len(calls(log))
    assert contents(build(SlowFeaturizer(str(log)), cache)) == full
    assert len(calls(log)) - first == len(SMILES) - 8


def journal_key(cache: Path) -> str:
    """The key the journal in `cache` was written for (its parts' headers say it)."""
    import json
    import struct

    part = next(cache.glob("*.journal/*.part")).read_bytes()
    _, n_header, _, _ = struct.unpack_from("<8sIII", part)
    return json.loads(part[20 : 20 + n_header])["key"]


CONFORMER_SMILES = ["CCO", "CCN", "CCCO", "OCCO", "CC(=O)O", "CCOC", "c1ccccc1", "CCCCN"]


class LoggedGraph3D(Graph3D):
    """ETKDG + MMFF conformers under the `graph3d` cache's own key, each call logged;
    the molecule `held` (a SMILES) is never finished: its worker waits there until the
    build is stopped, which then cannot have ended first, however slowly the test runs."""

    def __init__(self, log_dir: str, held: str | None = None) -> None:
        super().__init__()
        self.log_dir, self.held = log_dir, held

    def __call__(self, mol: MolInput) -> dict[str, np.ndarray]:
        with open(Path(self.log_dir) / f"{os.getpid()}.log", "a") as f:
            f.write(mol.smiles + "\n")
        while mol.smiles == self.held:
            time.sleep(0.05)
        return super().__call__(mol)


def conformer_table() -> MoleculeTable:
    smiles = np.array(CONFORMER_SMILES)
    return MoleculeTable("t", np.arange(len(smiles)), smiles, {"y": np.zeros(len(smiles))})


def _conformers_in_child(cache: str, log_dir: str) -> None:
    FeatureStore.build_or_open(
        LoggedGraph3D(log_dir, held=CONFORMER_SMILES[6]),
        conformer_table(),
        cache,
        n_jobs=1,
        progress=False,
    )


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stopped_conformer_build_keeps_what_it_finished(tmp_path, often, monkeypatch, signum):
    """MMFF conformers: a build stopped by a signal goes on from its journal; the
    molecules it finished are not embedded again, and the cache equals an uninterrupted
    build's."""
    monkeypatch.setattr("oodmol.parallel.start_method", lambda: "fork")
    # one molecule per message: each finished one reaches the journal, the held one alone
    monkeypatch.setattr("oodmol.parallel._BATCH_SECONDS", 0.0)
    log = tmp_path / "log"
    log.mkdir()
    full = FeatureStore.build_or_open(
        Graph3D(), conformer_table(), tmp_path / "full", n_jobs=1, progress=False
    )
    cache = tmp_path / "cache"
    child = multiprocessing.get_context("fork").Process(
        target=_conformers_in_child, args=(str(cache), str(log))
    )
    child.start()
    deadline = time.monotonic() + 60
    while len(list(cache.glob("*.journal/*.part"))) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(child.pid, signum)
    child.join(timeout=60)
    assert child.exitcode is not None and child.exitcode != 0
    assert not list(cache.glob("*.lmdb.seal")) and not list(cache.glob("*.tmp-*"))
    (journal,) = cache.glob("*.journal")
    finished = store_module.Journal(journal, journal_key(cache)).read()
    assert 3 <= len(finished) < len(CONFORMER_SMILES), "the build was not stopped part-way"
    before = calls_per_process(log)

    resumed = FeatureStore.build_or_open(
        LoggedGraph3D(str(log)), conformer_table(), cache, n_jobs=1, progress=False
    )

    # per process: pids sort as text, so a new process's log may come before the child's
    after = calls_per_process(log)
    redone = [s for name, lines in after.items() for s in lines[len(before.get(name, [])) :]]
    assert sorted(redone) == sorted(s for i, s in enumerate(CONFORMER_SMILES) if i not in finished)
    assert resumed.path.name == full.path.name  # the graph3d cache's own key
    for mol_id in range(len(CONFORMER_SMILES)):
        ours, theirs = resumed.get(mol_id), full.get(mol_id)
        assert ours.keys() == theirs.keys()
        for name in ours:
            np.testing.assert_array_equal(ours[name], theirs[name])
    assert not list(cache.glob("*.journal"))
