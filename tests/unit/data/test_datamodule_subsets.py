"""A run with `max_molecules` featurises the molecules it looks at and no others: its
subset of each set, and where the featuriser fails on one, the next of that set."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from oodmol.data.baseline import LinearBaseline
from oodmol.data.datamodule import MoleculeDataModule
from oodmol.data.features import VectorFeatures
from oodmol.data.featurize.base import FeaturizationError, MolInput
from oodmol.data.featurize.conformers import embed
from oodmol.data.featurize.fingerprints import MorganFingerprint
from oodmol.data.splits.splitters import RandomSplitter
from oodmol.data.store import FeatureStore
from oodmol.data.subsets import offer_order, offered, subset
from oodmol.data.task import csv_task, load_split, load_task

# 30 molecules: OOD 6, ID round(0.2 * 24) = 5, val round(0.2 * 19) = 4, train 15
SPLITTER = {"ood_size": 6, "id_fraction": 0.2, "val_fraction": 0.2, "seed": 3}


class Counted(MorganFingerprint):
    """Morgan bits, each call logged (to count them across processes); the SMILES in
    `fails_on` it cannot represent."""

    name = "counted"

    def __init__(self, log_dir: str, fails_on: tuple[str, ...] = ()) -> None:
        super().__init__(n_bits=64)
        self.log_dir, self.fails_on = log_dir, tuple(fails_on)

    def params(self) -> dict:
        return {**super().params(), "fails_on": list(self.fails_on)}

    def __call__(self, mol: MolInput) -> dict[str, np.ndarray]:
        with open(Path(self.log_dir) / f"{os.getpid()}.log", "a") as f:
            f.write(mol.smiles + "\n")
        if mol.smiles in self.fails_on:
            raise FeaturizationError("no bits for it")
        return super().__call__(mol)


def calls(log_dir: Path) -> list[str]:
    return [line for p in sorted(log_dir.glob("*.log")) for line in p.read_text().splitlines()]


@pytest.fixture
def task(make_csv):
    rows = [f"{'C' * k},{k * 0.5}" for k in range(1, 11)]
    rows += [f"{'C' * k}O,{k * 0.7 - 3}" for k in range(1, 11)]
    rows += [f"{'C' * k}N,{k * 0.3 + 1}" for k in range(1, 11)]
    return csv_task(str(make_csv("chains.csv", "smiles,y", rows)), "y", name="chains")


@pytest.fixture(autouse=True)
def forked_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Featurisation workers forked from this process, not started afresh by a fork
    server (an import elsewhere loads tokenizers): a second each instead of tens."""
    monkeypatch.setattr("oodmol.parallel.start_method", lambda: "fork")


@pytest.fixture
def log(tmp_path) -> Path:
    folder = tmp_path / "log"
    folder.mkdir()
    return folder


class Pulled(MorganFingerprint):
    """A stand-in geometry: ETKDG + MMFF conformers, with the first atom of the listed
    molecules pulled 5 Å away (a broken bond)."""

    name = "pulled"

    def __init__(self, broken: tuple[str, ...]) -> None:
        super().__init__(n_bits=64)
        self.broken = tuple(broken)

    def params(self) -> dict:
        return {"broken": list(self.broken)}

    def __call__(self, mol: MolInput) -> dict[str, np.ndarray]:
        conformer = embed(mol.smiles)
        pos = conformer.positions.copy()
        if mol.smiles in self.broken:
            pos[0] += 5.0
        return {"z": conformer.atomic_numbers, "pos": pos}


def loaded(
    task, data_dir: Path, featurizer, max_molecules: int | None, **kwargs
) -> MoleculeDataModule:
    dm = MoleculeDataModule(
        task,
        RandomSplitter(**SPLITTER),
        featurizer,
        VectorFeatures(),
        data_dir=str(data_dir),
        progress=False,
        max_molecules=max_molecules,
        **kwargs,
    )
    dm.prepare_data()
    dm.setup()
    return dm


def smiles_of(dm: MoleculeDataModule, ids) -> list[str]:
    return dm.data.dataset.smiles[dm.data.dataset.rows_of(np.asarray(ids))].tolist()


def smiles_of_ids(task, data_dir: Path, ids) -> list[str]:
    dataset = load_task(task, data_dir, False).dataset
    return dataset.smiles[dataset.rows_of(np.asarray(ids))].tolist()


def used(dm: MoleculeDataModule) -> np.ndarray:
    return np.unique(np.concatenate(list(dm.set_ids.values())))


def test_a_subset_run_featurises_its_subset_alone(task, data_dir, log) -> None:
    dm = loaded(task, data_dir, Counted(str(log)), max_molecules=3)
    assert {name: len(ids) for name, ids in dm.set_ids.items()} == dict.fromkeys(
        ("train", "val", "id", "ood"), 3
    )
    assert sorted(calls(log)) == sorted(smiles_of(dm, used(dm)))
    assert dm.store.mol_ids().tolist() == used(dm).tolist()
    splitter = RandomSplitter(**SPLITTER)
    for name, ids in dm.split.sets.items():  # what `oodmol llm` asks: the same molecules
        assert dm.set_ids[name].tolist() == subset(ids, name, 3, splitter).tolist()


def test_a_molecule_without_features_is_replaced_by_the_next_of_its_set(
    task, data_dir, log
) -> None:
    split = load_split(load_task(task, data_dir, False), RandomSplitter(**SPLITTER), data_dir)
    order = offer_order(split.sets["train"], "train", 3, RandomSplitter(**SPLITTER))
    first, fourth = (str(s) for s in smiles_of_ids(task, data_dir, order[[0, 3]]))

    dm = loaded(task, data_dir, Counted(str(log), fails_on=(first,)), max_molecules=3)

    assert dm.set_ids["train"].tolist() == sorted(order[1:4].tolist())
    assert fourth in calls(log) and len(calls(log)) == 4 * 3 + 1  # one replacement
    assert dm.feature_facts["left_out"]["train"] == 1
    assert dm.feature_facts["sizes_used"]["train"] == 3
    assert sorted(dm.store.failed) == [int(order[0])]
    assert dm.store.mol_ids().tolist() == sorted([*used(dm).tolist(), int(order[0])])


def test_a_larger_subset_adds_to_the_smaller_ones_cache(task, data_dir, log) -> None:
    small = loaded(task, data_dir, Counted(str(log)), max_molecules=2)
    before = len(calls(log))
    large = loaded(task, data_dir, Counted(str(log)), max_molecules=4)

    for name in small.set_ids:  # the larger subset holds the smaller one
        assert set(small.set_ids[name]) <= set(large.set_ids[name])
    assert len(calls(log)) - before == len(used(large)) - len(used(small))
    assert large.store.path == small.store.path
    assert large.store.mol_ids().tolist() == used(large).tolist()


def test_a_run_on_every_molecule_featurises_the_whole_data_set(task, data_dir, log) -> None:
    dm = loaded(task, data_dir, Counted(str(log)), max_molecules=None)
    assert len(calls(log)) == 30 == len(dm.store)
    assert sum(len(ids) for ids in dm.set_ids.values()) == 30


def test_a_subset_run_checks_the_geometries_of_its_subset_alone(task, data_dir, log) -> None:
    """With a geometry filter, the geometry is built and checked for the molecules the
    run looks at, and a molecule that fails the checks is replaced like one without
    features."""
    split = load_split(load_task(task, data_dir, False), RandomSplitter(**SPLITTER), data_dir)
    order = offer_order(split.sets["train"], "train", 3, RandomSplitter(**SPLITTER))
    (broken,) = smiles_of_ids(task, data_dir, order[:1])
    geometry = {"pulled": Pulled((broken,))}

    dm = loaded(task, data_dir, Counted(str(log)), 3, geometry_filter=geometry)

    assert dm.set_ids["train"].tolist() == sorted(order[1:4].tolist())
    assert dm.feature_facts["geometry_filter"]["left_out"] == {"train": 1}
    report = dm.geometry_reports["pulled"]
    assert (report.n_molecules, list(report.failed)) == (4 * 3 + 1, [int(order[0])])
    (path,) = (data_dir / "features").glob("*-pulled-*.lmdb")
    pulled = FeatureStore.build_or_open(
        geometry["pulled"], dm.data.dataset, path.parent, progress=False, mol_ids=[]
    )
    assert pulled.mol_ids().tolist() == dm.store.mol_ids().tolist()
    assert len(dm.store.mol_ids()) == 4 * 3 + 1


def test_a_set_offers_its_molecules_in_one_seeded_order() -> None:
    ids = np.arange(100, 120)
    splitter = RandomSplitter(**SPLITTER)
    order = offer_order(ids, "id", 3, splitter)
    assert sorted(order.tolist()) == ids.tolist() and order.tolist() != ids.tolist()
    assert offer_order(ids, "id", 7, splitter).tolist() == order.tolist()  # whatever the size
    assert offer_order(ids, "ood", 3, splitter).tolist() != order.tolist()  # each set its own
    assert offer_order(ids, "id", None, splitter).tolist() == ids.tolist()  # every molecule
    assert subset(ids, "id", 3, splitter).tolist() == sorted(order[:3].tolist())


def test_a_run_looks_at_the_molecules_up_to_its_last_usable_one() -> None:
    order = np.array([5, 3, 9, 1, 7])
    assert offered(order, 2, np.array([3])).tolist() == [5, 3, 9]
    assert offered(order, 2, np.array([], dtype=np.int64)).tolist() == [5, 3]
    assert offered(order, 4, np.array([3, 9])).tolist() == [5, 3, 9, 1, 7]  # too few: all
    assert offered(order, None, np.array([3])).tolist() == [5, 3, 9, 1, 7]


class Estimate(MorganFingerprint):
    """A stand-in physics estimate: one column, the SMILES' length, and no finite value
    for the listed molecules."""

    name = "estimate"
    columns = ("length",)

    def __init__(self, missing: tuple[str, ...]) -> None:
        super().__init__(n_bits=64)
        self.missing = tuple(missing)

    def params(self) -> dict:
        return {"missing": list(self.missing)}

    def __call__(self, mol: MolInput) -> dict[str, np.ndarray]:
        value = np.nan if mol.smiles in self.missing else float(len(mol.smiles))
        return {"x": np.array([value])}


def test_a_subset_run_builds_the_baselines_estimates_of_its_subset_alone(
    task, data_dir, log
) -> None:
    split = load_split(load_task(task, data_dir, False), RandomSplitter(**SPLITTER), data_dir)
    order = offer_order(split.sets["ood"], "ood", 3, RandomSplitter(**SPLITTER))
    (missing,) = smiles_of_ids(task, data_dir, order[:1])
    baseline = LinearBaseline(Estimate((missing,)), "length")

    dm = loaded(task, data_dir, Counted(str(log)), 3, baseline=baseline)

    assert dm.set_ids["ood"].tolist() == sorted(order[1:4].tolist())
    assert dm.feature_facts["left_out"]["ood"] == 1
    assert baseline.store.mol_ids().tolist() == dm.store.mol_ids().tolist()
    assert len(dm.store.mol_ids()) == 4 * 3 + 1
