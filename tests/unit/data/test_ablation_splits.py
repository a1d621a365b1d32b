"""The splits BOOM's ablations need: another property's KDE tail (pretraining without the
target's test molecules) and the OOD-augmented split (a fixed hold-out, nested additions)."""

from __future__ import annotations

import numpy as np
import pytest

from oodmol.data.splits.augmented import OODAugmentedSplitter
from oodmol.data.splits.splitters import KDETailSplitter
from oodmol.data.table import MoleculeTable

N = 400
OOD_SIZE = 60


def _table() -> MoleculeTable:
    rng = np.random.default_rng(7)
    a = rng.normal(size=N) ** 3  # heavy tails
    b = rng.normal(size=N)
    ids = rng.permutation(N).astype(np.int64) + 10  # rows not in id order
    smiles = np.array([f"C{i}" for i in ids], dtype=str)
    return MoleculeTable("synthetic", ids, smiles, {"a": a, "b": b})


def test_split_by_another_property_is_that_propertys_split() -> None:
    table = _table()
    theirs = KDETailSplitter(OOD_SIZE).split(table, "b")
    ours = KDETailSplitter(OOD_SIZE, property="b").split(table, "a")
    assert ours.hash == theirs.hash
    assert ours.info["property"] == "b"
    # unset, the setting stays out of the split's settings (old split files keep their names)
    assert "property" not in KDETailSplitter(OOD_SIZE).settings()


def test_augmented_split_holds_out_a_fixed_set_and_adds_nested_tail_molecules() -> None:
    table = _table()
    y = table.targets["a"]
    value = dict(zip(table.mol_id.tolist(), y.tolist(), strict=True))
    base = KDETailSplitter(OOD_SIZE).split(table, "a")
    low, high = np.quantile(y, [0.25, 0.75])
    splits = {n: OODAugmentedSplitter(OOD_SIZE, n_augment=n).split(table, "a") for n in (0, 5, 12)}
    added_before = np.array([], dtype=np.int64)
    for n, split in splits.items():
        for name in ("id", "val"):  # ID and validation sets are split=ood's
            np.testing.assert_array_equal(split.sets[name], base.sets[name])
        # the hold-out: half of the 60 OOD molecules, the same for every N
        assert len(split.sets["ood"]) == OOD_SIZE // 2
        np.testing.assert_array_equal(split.sets["ood"], splits[0].sets["ood"])
        assert np.isin(split.sets["ood"], base.sets["ood"]).all()
        added = np.setdiff1d(split.sets["train"], base.sets["train"])
        assert len(added) == n and len(split.sets["train"]) == len(base.sets["train"]) + n
        assert np.isin(added, base.sets["ood"]).all()
        assert not np.isin(added, split.sets["ood"]).any()
        assert all(value[i] < low or value[i] > high for i in added.tolist())
        assert np.isin(added_before, added).all()  # nested as N grows
        added_before = added
    assert splits[12].info["holdout"] == 30 and splits[12].info["pool"] == 30


def test_hold_out_size_rule_and_a_pool_too_small_is_refused() -> None:
    table = _table()
    small = OODAugmentedSplitter(OOD_SIZE, holdout_size=8).split(table, "a")
    assert len(small.sets["ood"]) == 8  # min(8, 0.5 * 60)
    eligible = small.info["pool_beyond_quantiles"]
    with pytest.raises(ValueError, match=f"pool holds {eligible} molecules"):
        OODAugmentedSplitter(OOD_SIZE, holdout_size=8, n_augment=eligible + 1).split(table, "a")
    with pytest.raises(ValueError, match="holdout_fraction"):
        OODAugmentedSplitter(OOD_SIZE, holdout_fraction=1.0)
