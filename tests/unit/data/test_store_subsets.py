"""Feature caches of a subset: a request for some molecules featurises those alone, a
larger one later adds only the missing ones to the same cache, and a read of a molecule
the cache lacks is an error."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import pytest

from oodmol.data import store as store_module
from oodmol.data.featurize.base import FeaturizationError, Featurizer, MolInput
from oodmol.data.store import FeatureStore
from oodmol.data.table import MoleculeTable

SMILES = ["C", "CC", "CCC", "CCCC", "CCCCC", "CCO", "CCCO", "CCCCO", "CCN", "CCCl"]
MOL_IDS = np.array([7, -2, 30, 4, 11, 0, 25, 9, 2**33, 13])  # unsorted, a negative
SUBSET = [7, 4, 0, 13]


def make_table() -> MoleculeTable:
    return MoleculeTable("t", MOL_IDS, np.array(SMILES), {"y": np.zeros(len(SMILES))})


def known(smiles: str) -> np.ndarray:
    """The counting featuriser's answer: length, carbons, NaN for chlorides."""
    return np.array([len(smiles), smiles.count("C"), np.nan if "Cl" in smiles else 1.0])


class Counting(Featurizer):
    """`known` features, each call logged (to count them across processes); "CCN" is
    refused with a reason, and `fail_at` stops the build (an unexpected error)."""

    name = "counting"

    def __init__(self, log_dir: str, fail_at: str | None = None) -> None:
        self.log_dir, self.fail_at = log_dir, fail_at

    def params(self) -> dict:
        return {"version": 1}

    def __call__(self, mol: MolInput) -> dict[str, np.ndarray]:
        with open(Path(self.log_dir) / f"{os.getpid()}.log", "a") as f:
            f.write(mol.smiles + "\n")
        if mol.smiles == self.fail_at:
            raise RuntimeError("the machine went away")
        if mol.smiles == "CCN":
            raise FeaturizationError("no nitrogen here")
        return {"x": known(mol.smiles)}


class OnCounting(Featurizer):
    """A featuriser built on the counting one's cache: twice its features."""

    name = "on_counting"

    def __init__(self, log_dir: str) -> None:
        self.source = Counting(log_dir)

    def params(self) -> dict:
        return {"source": self.source.params()}

    def built_on(self) -> Featurizer:
        return self.source

    def input_from(self, smiles, arrays, refused) -> MolInput:
        if arrays is None:
            return MolInput(smiles, problem=refused)
        return MolInput(smiles, coords=arrays["x"])

    def __call__(self, mol: MolInput) -> dict[str, np.ndarray]:
        if mol.coords is None:
            raise FeaturizationError(f"no source features ({mol.problem})")
        return {"x": 2 * mol.coords}


def calls(log_dir: Path) -> list[str]:
    return [line for p in sorted(log_dir.glob("*.log")) for line in p.read_text().splitlines()]


@pytest.fixture
def log(tmp_path) -> Path:
    folder = tmp_path / "log"
    folder.mkdir()
    return folder


def build(featurizer: Featurizer, cache: Path, mol_ids=None, n_jobs: int = 1) -> FeatureStore:
    return FeatureStore.build_or_open(
        featurizer, make_table(), cache, n_jobs=n_jobs, progress=False, mol_ids=mol_ids
    )


def smiles_of(mol_ids) -> list[str]:
    rows = make_table().rows_of(np.asarray(mol_ids))
    return [SMILES[r] for r in rows]


def contents(store: FeatureStore) -> dict:
    """Each molecule's features as bytes (NaN equals NaN), failures left out."""
    return {
        m: store.get(m)["x"].tobytes() for m in store.mol_ids().tolist() if m not in store.failed
    }


def test_a_subset_featurises_its_molecules_alone(tmp_path, log) -> None:
    store = build(Counting(str(log)), tmp_path, SUBSET)
    assert sorted(calls(log)) == sorted(smiles_of(SUBSET))
    assert store.mol_ids().tolist() == sorted(SUBSET)
    assert len(store) == 4 and store.failed == {}
    np.testing.assert_array_equal(store.get(4)["x"], known("CCCC"))
    np.testing.assert_array_equal(store.matrix([13, 7]), [known("CCCl"), known("C")])
    assert store.meta["n_nonfinite_molecules"] == 1  # CCCl's NaN, counted as ever
    assert store.lacks(MOL_IDS).tolist() == [-2, 30, 11, 25, 9, 2**33]


def test_a_molecule_the_cache_lacks_is_an_error_never_a_zero(tmp_path, log) -> None:
    store = build(Counting(str(log)), tmp_path, SUBSET)
    for read in (
        lambda: store.get(30),
        lambda: store.matrix([7, 30]),
        lambda: list(store.iter_arrays([7, 30])),
    ):
        with pytest.raises(KeyError, match="mol_id 30 not in feature cache"):
            read()


def test_a_larger_request_adds_only_the_missing_molecules(tmp_path, log) -> None:
    first = build(Counting(str(log)), tmp_path / "cache", SUBSET)
    larger = [*SUBSET, 30, 2**33, -2]
    grown = build(Counting(str(log)), tmp_path / "cache", larger)

    assert grown.path == first.path  # the same cache, grown
    assert sorted(calls(log)) == sorted(smiles_of(larger))  # each molecule once
    assert grown.mol_ids().tolist() == sorted(larger)
    assert grown.failed == {2**33: "CCN: no nitrogen here"}  # a failure, with its reason
    assert len(list((tmp_path / "cache").glob("*.lmdb"))) == 1
    assert not list((tmp_path / "cache").glob("*.journal"))

    before = len(calls(log))
    assert build(Counting(str(log)), tmp_path / "cache", [7, 2**33]).meta == grown.meta
    assert len(calls(log)) == before  # what it holds, failures too, is never asked again


def test_the_whole_table_after_a_subset_equals_a_whole_build(tmp_path, log) -> None:
    whole = build(Counting(str(log)), tmp_path / "whole")
    build(Counting(str(log)), tmp_path / "grown", SUBSET)
    before = len(calls(log))

    grown = build(Counting(str(log)), tmp_path / "grown")

    assert len(calls(log)) - before == len(SMILES) - len(SUBSET)
    assert contents(grown) == contents(whole)
    volatile = ("created", "build_seconds")
    assert {k: v for k, v in grown.meta.items() if k not in volatile} == {
        k: v for k, v in whole.meta.items() if k not in volatile
    }
    assert build(Counting(str(log)), tmp_path / "grown", SUBSET).meta == grown.meta


def test_a_molecule_outside_the_table_is_refused_by_id(tmp_path, log) -> None:
    with pytest.raises(KeyError, match=r"not in table 't': \[12345\]"):
        build(Counting(str(log)), tmp_path, [7, 12345])
    assert calls(log) == []


def test_a_featuriser_built_on_another_builds_that_for_the_subset_alone(tmp_path, log) -> None:
    store = build(OnCounting(str(log)), tmp_path, [7, 2**33, 9])
    assert sorted(calls(log)) == sorted(smiles_of([7, 2**33, 9]))
    np.testing.assert_array_equal(store.get(9)["x"], 2 * known("CCCCO"))
    assert store.failed[2**33].endswith("no source features (CCN: no nitrogen here)")
    source = build(Counting(str(log)), tmp_path, [7])  # held already: opened, not built
    assert source.mol_ids().tolist() == [7, 9, 2**33]
    assert len(calls(log)) == 3


def test_a_stopped_extension_keeps_what_it_finished(tmp_path, log, monkeypatch) -> None:
    """The held molecules and those the stopped build finished are not featurised again,
    and the cache equals one built without a stop."""
    monkeypatch.setattr(store_module, "_JOURNAL_SECONDS", 0.0)  # a journal part per molecule
    whole = contents(build(Counting(str(tmp_path)), tmp_path / "whole"))
    cache = tmp_path / "cache"
    build(Counting(str(log)), cache, SUBSET)
    # in key order after the subset: 9 (CCCCO), 11 (CCCCC), 25 (CCCO), 30 (CCC) stops it
    with pytest.raises(RuntimeError, match="the machine went away"):
        build(Counting(str(log), fail_at="CCC"), cache)
    assert len(list(cache.glob("*.journal/*.part"))) == 3
    before = len(calls(log))

    resumed = build(Counting(str(log)), cache)

    assert sorted(calls(log)[before:]) == sorted(["CCC", "CCN", "CC"])  # 30, 2**33, -2
    assert contents(resumed) == whole
    assert not list(cache.glob("*.journal"))


def test_a_damaged_subset_cache_is_rebuilt_for_what_is_asked(tmp_path, log, caplog) -> None:
    store = build(Counting(str(log)), tmp_path, SUBSET)
    with open(store.path, "r+b") as f:
        f.seek(store.path.stat().st_size // 2)
        f.write(b"\xff" * 64)
    with caplog.at_level(logging.WARNING, logger="oodmol.data.store"):
        rebuilt = build(Counting(str(log)), tmp_path, [7, 30])
    assert "corrupted" in caplog.text and "rebuilding" in caplog.text
    assert rebuilt.mol_ids().tolist() == [7, 30]
    np.testing.assert_array_equal(rebuilt.get(30)["x"], known("CCC"))
