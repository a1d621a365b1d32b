"""MoleculeDataModule refuses settings and selections that would waste a run: a bad
`max_molecules` before any data is read, a set left empty before any training."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from oodmol.data.datamodule import MoleculeDataModule
from oodmol.data.features import VectorFeatures
from oodmol.data.featurize.base import FeaturizationError, MolInput
from oodmol.data.featurize.fingerprints import MorganFingerprint
from oodmol.data.splits.assignment import EmptySetError
from oodmol.data.splits.splitters import RandomSplitter
from oodmol.data.task import csv_task, load_split, load_task

# 12 molecules: OOD 2, ID round(0.1 * 10) = 1, val round(0.2 * 9) = 2, train 7
SPLITTER = {"ood_size": 2, "id_fraction": 0.1, "val_fraction": 0.2, "seed": 0}


class FailsOn(MorganFingerprint):
    """Morgan bits, except for the given SMILES, which it cannot represent."""

    name = "fails_on"

    def __init__(self, smiles: list[str]) -> None:
        super().__init__(n_bits=64)
        self.smiles = smiles

    def params(self) -> dict:
        return {**super().params(), "fails_on": self.smiles}

    def __call__(self, mol: MolInput) -> dict[str, np.ndarray]:
        if mol.smiles in self.smiles:
            raise FeaturizationError("no features")
        return super().__call__(mol)


def _module(task, data_dir: Path, featurizer=None, **kwargs) -> MoleculeDataModule:
    return MoleculeDataModule(
        task,
        RandomSplitter(**SPLITTER),
        featurizer or MorganFingerprint(n_bits=64),
        VectorFeatures(),
        data_dir=str(data_dir),
        progress=False,
        **kwargs,
    )


@pytest.fixture
def task(make_csv):
    rows = [f"{'C' * k},{k * 0.5}" for k in range(1, 7)]
    rows += [f"{'C' * k}O,{k * 0.7 - 3}" for k in range(1, 7)]
    return csv_task(str(make_csv("chains.csv", "smiles,y", rows)), "y", name="chains")


@pytest.mark.parametrize("value", [0, -3, 2.5, 2.0, True, "abc", "100"])
def test_bad_max_molecules_is_refused_before_any_data_is_read(task, tmp_path, value) -> None:
    data_dir = tmp_path / "data"
    with pytest.raises(ValueError, match="max_molecules must be a positive whole number") as e:
        _module(task, data_dir, max_molecules=value)
    assert f"got {value!r} ({type(value).__name__})" in str(e.value)
    assert not data_dir.exists()


@pytest.mark.parametrize("value", [None, 1, np.int64(500)])
def test_good_max_molecules_is_kept(task, tmp_path, value) -> None:
    assert _module(task, tmp_path / "data", max_molecules=value).max_molecules == value


@pytest.mark.slow  # embeds conformers, failures included
def test_set_emptied_by_featurisation_failures_stops_before_training(task, data_dir) -> None:
    """The split's one ID molecule has no features: setup fails naming every set's size
    before and after, the empty set, and why, instead of training and scoring nothing."""
    data = load_task(task, data_dir, progress=False)
    split = load_split(data, RandomSplitter(**SPLITTER), data_dir)
    assert split.sizes() == {"train": 7, "val": 2, "id": 1, "ood": 2}
    (id_smiles,) = data.table.smiles[data.table.rows_of(split.sets["id"])]
    dm = _module(task, data_dir, featurizer=FailsOn([str(id_smiles)]), max_molecules=5)
    dm.prepare_data()
    with pytest.raises(EmptySetError) as error:
        dm.setup("fit")
    message = str(error.value)
    assert message.startswith(
        "chains: of the split's 12 molecules (train 7, val 2, id 1, ood 2), this run uses: "
        "train 5, val 2, id 0, ood 2; the id set is empty; 1 left out for lack of fails_on "
        f"features (e.g. mol_id {split.sets['id'][0]} ({id_smiles}: no features)); make"
    )
    assert dm.datasets == {}


class PulledApart(MorganFingerprint):
    """A stand-in geometry: ETKDG + MMFF conformers where the listed molecules' first
    heavy atom is pulled 5 Å away (a broken bond), and others have no geometry."""

    name = "pulled"

    def __init__(self, broken: list[str], missing: list[str]) -> None:
        super().__init__(n_bits=64)
        self.broken, self.missing = broken, missing

    def params(self) -> dict:
        return {"broken": self.broken, "missing": self.missing}

    def __call__(self, mol: MolInput) -> dict[str, np.ndarray]:
        from oodmol.data.featurize.conformers import embed

        if mol.smiles in self.missing:
            raise FeaturizationError("no geometry")
        conformer = embed(mol.smiles)
        pos = conformer.positions.copy()
        if mol.smiles in self.broken:
            pos[0] += 5.0
        return {"z": conformer.atomic_numbers, "pos": pos}


def test_geometry_filter_leaves_out_what_any_geometry_fails(task, data_dir) -> None:
    """Molecules failing the checks of either geometry, or without one, leave every run
    (the same molecules for both); counted per set and named in the run's data facts."""
    data = load_task(task, data_dir, progress=False)
    split = load_split(data, RandomSplitter(**SPLITTER), data_dir)
    train = data.table.smiles[data.table.rows_of(split.sets["train"])].tolist()
    broken, missing = train[:2], train[2:3]
    geometries = {"a": PulledApart(broken, []), "b": PulledApart([], missing)}
    dm = _module(task, data_dir, geometry_filter=geometries)
    dm.prepare_data()
    dm.setup()
    facts = dm.feature_facts["geometry_filter"]
    assert facts["left_out"] == {"train": 3}
    assert dm.feature_facts["sizes_used"]["train"] == 7 - 3
    assert facts["geometries"]["a"]["reasons"] == {
        "bond broken": 2,
        "fragments split off": 2,
        "valence outside the table": 2,
    }
    assert facts["geometries"]["b"]["failed"] == 1
    kept = set(data.table.smiles[data.table.rows_of(dm.set_ids["train"])].tolist())
    assert not kept & set(broken + missing)
