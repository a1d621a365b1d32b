"""Training-set statistics a model is built from: known answers on hand-made geometries,
the training molecules only, and the cache."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from oodmol.data.features import PointCloudFeatures, VectorFeatures
from oodmol.data.featurize.fingerprints import MorganFingerprint
from oodmol.data.featurize.graph3d import Graph3D
from oodmol.data.statistics import (
    AtomReferenceFit,
    AverageNeighbours,
    ElementOffsets,
    ElementsPresent,
    FeatureFact,
    TrainingSplit,
    compute_statistics,
)
from oodmol.data.store import FeatureStore
from oodmol.data.table import Geometry, MoleculeTable

# Three "molecules" with given geometries (Å): a straight chain C-C-O with 1 Å steps,
# a lone N, and an H2 pair 0.7 Å apart; a fourth, with fluorine, is a test molecule.
MOLECULES = [
    ([6, 6, 8], [[0, 0, 0], [1, 0, 0], [2, 0, 0]]),
    ([7], [[0, 0, 0]]),
    ([1, 1], [[0, 0, 0], [0.7, 0, 0]]),
    ([9, 6], [[0, 0, 0], [1.3, 0, 0]]),
]
OFFSETS = {1: -0.5, 6: 2.0, 7: 3.0, 8: 5.0, 9: 11.0}  # a target that is a sum of these


def point_clouds(tmp_path: Path) -> tuple[FeatureStore, np.ndarray, np.ndarray]:
    numbers = np.concatenate([np.array(z, dtype=np.int8) for z, _ in MOLECULES])
    coords = np.concatenate([np.array(c, dtype=np.float32) for _, c in MOLECULES])
    offsets = np.cumsum([0] + [len(z) for z, _ in MOLECULES]).astype(np.int64)
    y = np.array([sum(OFFSETS[z] for z in zs) for zs, _ in MOLECULES])
    table = MoleculeTable(
        "given",
        np.arange(len(MOLECULES)),
        np.array(["CCO", "N", "[H][H]", "CF"]),
        {"y": y},
        Geometry(numbers, coords, offsets),
    )
    store = FeatureStore.build_or_open(Graph3D(), table, tmp_path, n_jobs=1, progress=False)
    return store, np.arange(3), y[:3]  # the first three are the training molecules


@pytest.fixture
def train(tmp_path: Path) -> TrainingSplit:
    store, ids, y = point_clouds(tmp_path)
    features = PointCloudFeatures()
    features.fit(store, ids)
    return TrainingSplit(store, features, ids, y)


def test_elements_are_those_of_the_training_molecules(train: TrainingSplit) -> None:
    assert ElementsPresent().compute(train) == [1, 6, 7, 8]  # not the test molecule's F


def test_average_neighbours_counts_pairs_within_the_cutoff(train: TrainingSplit) -> None:
    # cutoff 1.5: the chain's ends have 1 neighbour and its middle 2, N none, each H 1
    assert AverageNeighbours(1.5).compute(train) == pytest.approx((1 + 2 + 1 + 0 + 1 + 1) / 6)
    # cutoff 0.5: no pair is that close
    assert AverageNeighbours(0.5).compute(train) == 0.0
    # cutoff 2.5: the chain is complete
    assert AverageNeighbours(2.5).compute(train) == pytest.approx((2 + 2 + 2 + 0 + 1 + 1) / 6)


def test_element_offsets_recover_a_sum_of_per_element_terms(train: TrainingSplit) -> None:
    offsets = ElementOffsets().compute(train)
    # three molecules, four elements: C and O appear together only, so least squares
    # splits C-C-O's 9.0 by its minimum-norm solution; H and N are determined exactly
    assert offsets["1"] == pytest.approx(-0.5) and offsets["7"] == pytest.approx(3.0)
    assert 2 * offsets["6"] + offsets["8"] == pytest.approx(9.0)
    assert set(offsets) == {"1", "6", "7", "8"}


def test_atom_reference_fit_leaves_the_part_of_the_targets_the_offsets_miss(
    tmp_path: Path,
) -> None:
    """Targets Σ offsets + a known remainder: the fit recovers the offsets of the training
    molecules' elements (not the test molecule's F) and the remainder's mean and spread."""
    store, ids, y = point_clouds(tmp_path)
    features = PointCloudFeatures()
    features.fit(store, ids)
    exact = AtomReferenceFit().compute(TrainingSplit(store, features, ids, y))
    assert exact["offsets"] == ElementOffsets().compute(TrainingSplit(store, features, ids, y))
    assert set(exact["offsets"]) == {"1", "6", "7", "8"}
    # nothing is left: the mean is 0 and the spread falls back to 1
    assert exact["residual_mean"] == pytest.approx(0.0, abs=1e-9)
    assert exact["residual_std"] == 1.0
    # one more H2 molecule with a target 1.0 above Σ offsets: least squares gives H
    # −0.5 + 0.25 and leaves ±0.5 on the two H2 molecules, 0 on the others
    extra = np.append(ids, 2)
    shifted = np.append(y, y[2] + 1.0)
    fit = AtomReferenceFit().compute(TrainingSplit(store, features, extra, shifted))
    assert fit["offsets"]["1"] == pytest.approx(-0.25)
    residuals = np.array([0.0, 0.0, -0.5, 0.5])
    assert fit["residual_mean"] == pytest.approx(0.0, abs=1e-9)
    assert fit["residual_std"] == pytest.approx(residuals.std(ddof=1))


def test_feature_fact_reads_the_fitted_features(tmp_path: Path) -> None:
    table = MoleculeTable("t", np.arange(3), np.array(["CCO", "CCN", "c1ccccc1"]), {})
    store = FeatureStore.build_or_open(
        MorganFingerprint(radius=2, n_bits=64, counts=False), table, tmp_path, n_jobs=1
    )
    features = VectorFeatures()
    features.fit(store, np.arange(3))
    split = TrainingSplit(store, features, np.arange(3), np.zeros(3))
    assert FeatureFact("in_dim").compute(split) == 64
    with pytest.raises(ValueError, match=r"know \['in_dim'\], not 'atom_dim'"):
        FeatureFact("atom_dim").compute(split)


def test_statistics_are_cached_by_molecules_and_settings(train, tmp_path: Path) -> None:
    cache = tmp_path / "statistics"
    specs = {"backbone.avg": AverageNeighbours(1.5)}
    compute_statistics(specs, train, cache)
    (stored,) = cache.glob("*.json")
    # the cache answers: a tampered stored value is what comes back
    saved = json.loads(stored.read_text())
    stored.write_text(json.dumps({**saved, "value": 123.0}))
    assert compute_statistics(specs, train, cache) == {"backbone.avg": 123.0}
    # another setting, or other training molecules, is another entry
    compute_statistics({"backbone.avg": AverageNeighbours(2.5)}, train, cache)
    fewer = TrainingSplit(train.store, train.features, train.mol_ids[:2], train.targets[:2])
    assert compute_statistics(specs, fewer, cache) == {"backbone.avg": pytest.approx(4 / 4)}
    assert len(list(cache.glob("*.json"))) == 3


@pytest.mark.parametrize(
    "damage",
    [b"[1, 2]", b'{"identity": null}', b"\xff\xfe not text", b'{"value": 1'],
    ids=["a_list", "no_value", "not_utf8", "truncated"],
)
def test_a_damaged_statistic_is_computed_again(train, tmp_path: Path, damage: bytes) -> None:
    cache = tmp_path / "statistics"
    specs = {"backbone.avg": AverageNeighbours(1.5)}
    computed = compute_statistics(specs, train, cache)
    (stored,) = cache.glob("*.json")
    stored.write_bytes(damage)
    assert compute_statistics(specs, train, cache) == computed
    assert json.loads(stored.read_text())["value"] == computed["backbone.avg"]


class InMemoryStore:
    """A feature cache's `matrix`, from an array (rows by mol_id)."""

    def __init__(self, x: np.ndarray) -> None:
        self.x = x

    def matrix(self, mol_ids: np.ndarray, field: str = "x") -> np.ndarray:
        assert field == "x"  # the vectors' one field
        return self.x[np.asarray(mol_ids)]


def test_a_column_of_negligible_spread_is_centred_not_scaled() -> None:
    """Known answers: a column spread by 1e-20 (a vanishing tail) stays as small as it is
    for a test molecule instead of standing 1e3 standard deviations out; an informative
    column is standardised; a constant one is centred."""
    train = np.array([[0.0, 1e-20, 5.0], [2.0, 3e-20, 5.0], [4.0, 2e-20, 5.0]])
    test = np.array([[2.0, 1e-17, 7.0]])
    features = VectorFeatures()
    features.fit(InMemoryStore(np.vstack([train, test])), np.arange(3))
    (row,) = features.matrix(InMemoryStore(np.vstack([train, test])), np.array([3]), "ood")
    assert row[0] == pytest.approx(0.0)
    assert abs(row[1]) < 1e-16
    assert row[2] == pytest.approx(2.0)
    (first,) = features.matrix(InMemoryStore(train), np.array([0]), "train")
    assert first[0] == pytest.approx(-2.0 / np.std([0.0, 2.0, 4.0]))
