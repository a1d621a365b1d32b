"""3D inputs: conformers and their fallbacks, the graph3d featuriser, molecules it cannot
represent (recorded by the cache, left out of runs and reported). The neighbour search
has its own tests (`test_neighbors.py`)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from oodmol.data.batches import PointCloudBatch
from oodmol.data.featurize.base import MolInput
from oodmol.data.featurize.conformers import ConformerError, ConformerMethod, embed
from oodmol.data.featurize.graph3d import Graph3D
from oodmol.data.store import FeatureStore
from oodmol.data.table import MoleculeTable

pytestmark = pytest.mark.usefixtures("one_thread")

CYCLOPROPYNE = "C1#CC1"  # no embedding exists: ETKDG fails, also from random coordinates


def bond_lengths(smiles: str) -> dict[tuple[int, int], list[float]]:
    """Bond lengths of the MMFF conformer by pair of atomic numbers (sorted)."""
    from rdkit import Chem

    conformer = embed(smiles)
    mol = Chem.AddHs(Chem.MolFromSmiles(smiles))
    lengths: dict[tuple[int, int], list[float]] = {}
    for bond in mol.GetBonds():
        i, j = bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()
        pair = tuple(sorted(int(conformer.atomic_numbers[k]) for k in (i, j)))
        d = float(np.linalg.norm(conformer.positions[i] - conformer.positions[j]))
        lengths.setdefault(pair, []).append(d)
    return lengths


def test_conformer_has_hydrogens_and_mmff_bond_lengths():
    conformer = embed("CCO")
    assert conformer.method is ConformerMethod.ETKDG_MMFF and conformer.converged
    assert sorted(conformer.atomic_numbers.tolist()) == [1] * 6 + [6, 6, 8]
    assert conformer.positions.dtype == np.float32 and conformer.positions.shape == (9, 3)
    lengths = bond_lengths("CCO")
    # MMFF94 equilibrium lengths: C-C 1.51-1.52, C-O 1.42, C-H 1.09-1.10, O-H 0.97 Å
    assert all(1.50 < d < 1.54 for d in lengths[(6, 6)])
    assert all(1.40 < d < 1.44 for d in lengths[(6, 8)])
    assert all(1.08 < d < 1.11 for d in lengths[(1, 6)])
    assert all(0.95 < d < 0.99 for d in lengths[(1, 8)])


def test_benzene_is_planar_and_seeded_conformers_repeat():
    first, again = embed("c1ccccc1", seed=3), embed("c1ccccc1", seed=3)
    np.testing.assert_array_equal(first.positions, again.positions)
    centred = first.positions - first.positions.mean(0)
    smallest_spread = np.linalg.svd(centred, compute_uv=False)[-1]
    assert smallest_spread < 1e-3  # all 12 atoms in one plane


@pytest.mark.parametrize(
    ("smiles", "max_iterations", "method"),
    [
        # one ETKDG attempt is not enough for this crowded alkane: random start, then MMFF
        ("CC(C)(C)C(C(C)(C)C)(C(C)(C)C)C(C)(C)C", 1, ConformerMethod.RANDOM_MMFF),
        ("OB(O)c1ccccc1", 0, ConformerMethod.ETKDG_UFF),  # MMFF94 has no boron
        ("c1cc[se]c1", 0, ConformerMethod.ETKDG_NO_FORCE_FIELD),  # nor does UFF for it
    ],
)
def test_fallbacks_on_molecules_known_to_be_hard(smiles, max_iterations, method):
    conformer = embed(smiles, max_iterations=max_iterations)
    assert conformer.method is method and method.is_fallback
    assert np.isfinite(conformer.positions).all()
    distances = np.linalg.norm(conformer.positions[:, None] - conformer.positions[None], axis=-1)
    assert distances[~np.eye(len(distances), dtype=bool)].min() > 0.7  # no collapsed atoms


def test_unembeddable_molecule_raises_a_conformer_error():
    with pytest.raises(ConformerError, match="also from random coordinates"):
        embed(CYCLOPROPYNE)


def test_graph3d_uses_given_geometry_as_is():
    z = np.array([6, 1, 1, 1, 1])
    coords = np.random.default_rng(0).normal(size=(5, 3))
    out = Graph3D()(MolInput("C", z, coords))
    np.testing.assert_array_equal(out["z"], z)
    np.testing.assert_array_equal(out["pos"], coords.astype(np.float32))
    assert out["conformer"].tolist() == [ConformerMethod.GIVEN, 1]


def test_graph3d_from_smiles_records_its_method():
    out = Graph3D(seed=0)(MolInput("CCO"))
    assert out["z"].dtype == np.int64 and out["pos"].dtype == np.float32
    assert out["conformer"].tolist() == [ConformerMethod.ETKDG_MMFF, 1]


def test_cache_records_failures_and_keeps_the_rest(tmp_path, caplog):
    smiles = np.array(["CCO", CYCLOPROPYNE, "C", "c1ccccc1"])
    table = MoleculeTable("hard", np.array([4, 9, 2, 7]), smiles, {"y": np.zeros(4)})
    with caplog.at_level(logging.WARNING):
        store = FeatureStore.build_or_open(Graph3D(), table, tmp_path, n_jobs=1, progress=False)
    assert len(store) == 3 and store.meta["n_failed"] == 1
    assert list(store.failed) == [9] and CYCLOPROPYNE in store.failed[9]
    assert "could not featurise 1 of 4 molecules" in caplog.text and "mol_id 9" in caplog.text
    with pytest.raises(KeyError):
        store.get(9)
    reopened = FeatureStore.build_or_open(Graph3D(), table, tmp_path, n_jobs=1, progress=False)
    assert reopened.failed == store.failed  # the record survives in the cache's meta


def test_runs_leave_out_and_report_molecules_without_3d_features(tmp_path, caplog):
    from oodmol.data.datamodule import MoleculeDataModule
    from oodmol.data.features import PointCloudFeatures
    from oodmol.data.splits.splitters import RandomSplitter
    from oodmol.data.task import csv_task

    rows = ["smiles,y", *(f"{'C' * (k + 1)},{k}" for k in range(12)), f"{CYCLOPROPYNE},99"]
    path = tmp_path / "tiny.csv"
    path.write_text("\n".join(rows) + "\n")
    task = csv_task(name="tiny3d", path=str(path), target_column="y", ood_size=0.2)
    dm = MoleculeDataModule(
        task,
        RandomSplitter(ood_size=0.2, id_fraction=0.2, val_fraction=0.2, seed=0),
        Graph3D(),
        PointCloudFeatures(),
        data_dir=str(tmp_path / "data"),
        batch_size=4,
        progress=False,
    )
    dm.prepare_data()
    with caplog.at_level(logging.WARNING):
        dm.setup("fit")
    left_out = dm.feature_facts["left_out"]
    assert sum(v for k, v in left_out.items() if k != "examples") == 1
    assert CYCLOPROPYNE in left_out["examples"][0] and "left out of this run" in caplog.text
    used = np.concatenate(list(dm.set_ids.values()))
    assert len(used) == 12 and len(set(used.tolist())) == 12
    sizes = {name: len(dm.datasets[name]) for name in dm.set_ids}
    assert sizes == dm.feature_facts["sizes_used"]
    batch = next(iter(dm.train_dataloader()))
    assert isinstance(batch, PointCloudBatch) and len(batch) == dm.batch_size
    assert batch.pos.shape == (len(batch.z), 3) and len(batch.molecule) == len(batch.z)
