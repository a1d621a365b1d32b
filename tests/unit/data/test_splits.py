"""Splits: BOOM's KDE tail against scikit-learn, the random and scaffold controls, leakage
checks, and the persisted split files."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from rdkit import Chem

from oodmol.data.sources.csv_source import CSVSource
from oodmol.data.splits.assignment import SETS, EmptySetError, LeakageError, SplitAssignment
from oodmol.data.splits.splitters import (
    KDETailSplitter,
    RandomSplitter,
    ScaffoldSplitter,
    Splitter,
    murcko_scaffold,
)
from oodmol.data.table import MoleculeTable
from oodmol.data.task import csv_task, load_split, load_task, split_path
from oodmol.data.validate import validate

# --------------------------------------------------------------------------- KDE tail


def synthetic_table() -> MoleculeTable:
    """400 molecules with shuffled, gapped ids; property values from three modes and a
    heavy tail, rounded so values repeat, plus isolated repeated outliers. The SMILES are
    placeholders (the KDE split reads only the target)."""
    rng = np.random.default_rng(7)
    y = np.concatenate(
        [
            rng.normal(0.0, 1.0, 150),
            rng.normal(6.0, 0.5, 120),
            rng.normal(3.0, 0.3, 63),
            8.0 + rng.pareto(1.5, 60),
        ]
    )
    y = np.concatenate([np.round(y, 1), [25.0] * 3, [40.0] * 2, [-6.0] * 2])
    ids = np.random.default_rng(1).permutation(np.arange(1000, 1000 + 3 * len(y), 3))
    smiles = np.array([f"placeholder-{i}" for i in ids])
    return MoleculeTable("synthetic", ids.astype(np.int64), smiles, {"y": y})


def kde_hash(seed: int) -> str:
    """Hash of the KDE split of the synthetic table (also run in a child process)."""
    return KDETailSplitter(ood_size=0.1, seed=seed).split(synthetic_table(), "y").hash


def _sklearn_lowest(table: MoleculeTable, n: int) -> set[int]:
    # imported here: the child process of the determinism test imports this module, and
    # scikit-learn alone takes seconds to import
    from sklearn.neighbors import KernelDensity

    y = table.targets["y"]
    kde = KernelDensity(kernel="gaussian", bandwidth="scott").fit(y[:, None])
    scores = kde.score_samples(y[:, None])
    return set(table.mol_id[np.lexsort((table.mol_id, scores))[:n]].tolist())


def _check_partition(split: SplitAssignment, table: MoleculeTable) -> None:
    every = np.concatenate([split.sets[name] for name in SETS])
    assert len(every) == len(np.unique(every)), "a molecule is in two sets"
    assert set(every.tolist()) == set(table.mol_id.tolist())
    for name in SETS:
        assert split.sets[name].dtype == np.int64
        assert np.all(np.diff(split.sets[name]) > 0), f"{name} ids not sorted"


@pytest.mark.parametrize("ood_size", [5, 36, 0.1])
def test_kde_ood_set_is_sklearns_lowest_density(ood_size: int | float) -> None:
    """The OOD set is exactly the lowest-density molecules under scikit-learn's Gaussian
    KDE with Scott's bandwidth, ties at the cut taken smallest id first. (Sizes 5 and 36
    cut through groups of equal density: -6.0/40.0 and the three -2.0 values.)"""
    table = synthetic_table()
    split = KDETailSplitter(ood_size=ood_size).split(table, "y")
    n = 40 if ood_size == 0.1 else ood_size
    assert set(split.sets["ood"].tolist()) == _sklearn_lowest(table, n)
    assert split.info["molecules_at_cut"] >= (1 if ood_size == 0.1 else 2)
    _check_partition(split, table)


@pytest.mark.parametrize(
    ("ood_size", "sizes"),
    [
        # rest 364: ID round(18.2) = 18, val round(0.1 * 346) = 35
        (36, {"train": 311, "val": 35, "id": 18, "ood": 36}),
        # 10 % of 400 = 40, rest 360: ID 18, val round(34.2) = 34
        (0.1, {"train": 308, "val": 34, "id": 18, "ood": 40}),
    ],
)
def test_kde_split_sizes(ood_size: int | float, sizes: dict[str, int]) -> None:
    """OOD takes ood_size (count or fraction); ID 5 % of the rest; val 10 % of what remains."""
    split = KDETailSplitter(ood_size=ood_size).split(synthetic_table(), "y")
    assert split.sizes() == sizes
    assert split.info["sizes"] == sizes


@pytest.mark.slow  # starts a Python process
def test_kde_split_is_deterministic_across_processes() -> None:
    """Same seed, same hash: here and in a fresh interpreter (own hash seed)."""
    here = kde_hash(0)
    assert kde_hash(0) == here
    code = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
        "import test_splits; print(test_splits.kde_hash(0))"
    )
    child = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert child.stdout.strip() == here


def test_kde_seed_changes_id_and_val_but_not_ood() -> None:
    """The seed only drives the ID/val/train draw; the OOD set is fixed by the data."""
    table = synthetic_table()
    a = KDETailSplitter(ood_size=0.1, seed=0).split(table, "y")
    b = KDETailSplitter(ood_size=0.1, seed=1).split(table, "y")
    np.testing.assert_array_equal(a.sets["ood"], b.sets["ood"])
    assert a.sets["id"].tolist() != b.sets["id"].tolist()
    assert a.sets["val"].tolist() != b.sets["val"].tolist()
    assert a.sizes() == b.sizes()
    assert a.hash != b.hash


@pytest.mark.parametrize(
    "splitter",
    [KDETailSplitter(ood_size=36), RandomSplitter(ood_size=36)],
    ids=["kde", "random"],
)
def test_row_order_does_not_change_the_split(splitter: Splitter) -> None:
    """Shuffling the table's rows gives the identical assignment."""
    table = synthetic_table()
    shuffled = table.take(np.random.default_rng(3).permutation(len(table)))
    assert shuffled.mol_id.tolist() != table.mol_id.tolist()
    assert splitter.split(shuffled, "y").hash == splitter.split(table, "y").hash


# --------------------------------------------------------------------------- molecules

RING_GROUPS = {  # scaffold template -> substituents; several molecules per scaffold
    "{}c1ccccc1": ["C", "CC", "O", "N", "F", "Cl", "OC", "N#C", "C(=O)O", "CCC", "CC(C)", "CO"],
    "{}c1ccncc1": ["C", "CC", "O", "N", "F", "Cl", "OC", "N#C"],
    "{}C1CCCCC1": ["C", "O", "N"],
    "{}c1ccc2ccccc2c1": ["C", "O", "F"],
    "{}c1ccc2[nH]ccc2c1": ["C", "O"],
    "{}C1CCNCC1": ["C", "O"],
    "{}c1ccsc1": ["C", "Cl"],
}
ACYCLIC = ["CCO", "CCCC", "CC(=O)O", "CCN", "CCOCC", "NCCO"]
SINGLETONS = [  # one molecule per ring system
    "C1CC1", "C1CCC1", "C1CCCC1", "C1CCCCCC1", "C1COCCN1", "C1CNCCN1", "c1cncnc1",
    "c1cnccn1", "c1c[nH]cn1", "c1cocn1", "c1cscn1", "c1cc[nH]n1", "C1CCOC1",
    "c1ccc2ncccc2c1", "c1ccc2cnccc2c1", "c1ccc2occc2c1", "c1ccc2[nH]cnc2c1",
    "C1C2CC3CC1CC(C2)C3", "c1ccc2c(c1)CCC2", "c1ccc2c(c1)CCCC2", "C1CCC2CCCCC2C1",
    "c1ccoc1", "c1cc[nH]c1", "C1CCSC1", "c1ccc(-c2ccccc2)cc1", "c1ccc(Cc2ccccc2)cc1",
    "c1ccc(Oc2ccccc2)cc1", "c1ccc(Nc2ccccc2)cc1", "C1CC2CCC1C2", "c1ccc2c(c1)oc1ccccc12",
]  # fmt: skip


def handmade_table() -> MoleculeTable:
    """68 real molecules: big, medium and singleton scaffold groups and acyclics."""
    smiles = [t.format(r) for t, subs in RING_GROUPS.items() for r in subs]
    smiles = [Chem.MolToSmiles(Chem.MolFromSmiles(s)) for s in smiles + ACYCLIC + SINGLETONS]
    assert len(set(smiles)) == len(smiles)
    ids = np.random.default_rng(5).permutation(len(smiles)).astype(np.int64) * 2 + 7
    y = np.random.default_rng(6).normal(size=len(smiles))
    return MoleculeTable("handmade", ids, np.array(smiles), {"y": y})


@pytest.fixture(params=["handmade", "lipophilicity300"])
def molecules(request, tmp_path: Path) -> MoleculeTable:
    """Real molecules: the hand-made set, and the first 300 Lipophilicity compounds."""
    if request.param == "handmade":
        return handmade_table()
    source_dir = request.getfixturevalue("source_dir")
    lines = (source_dir / "lipophilicity" / "lipophilicity.csv").read_text().splitlines()
    (tmp_path / "lipo300.csv").write_text("\n".join(lines[:301]) + "\n")
    source = CSVSource("lipo300", [str(tmp_path / "lipo300.csv")], target_columns=["target"])
    table, _ = validate(source.read(tmp_path), None, progress=False)
    assert len(table) == 300
    return MoleculeTable("lipo300", table.mol_id, table.smiles, {"y": table.targets["target"]})


def _quotas(n: int, ood: float) -> tuple[int, int, int]:
    """OOD, ID and val sizes as the splitters document them (fractions rounded)."""
    n_ood = round(ood * n)
    n_id = round(0.05 * (n - n_ood))
    return n_ood, n_id, round(0.10 * (n - n_ood - n_id))


def test_random_split_sizes_and_partition(molecules: MoleculeTable) -> None:
    """The random control holds out exactly ood_size; ID and val as for the KDE split."""
    split = RandomSplitter(ood_size=0.1, seed=0).split(molecules, "y")
    n_ood, n_id, n_val = _quotas(len(molecules), 0.1)
    assert split.sizes() == {
        "train": len(molecules) - n_ood - n_id - n_val,
        "val": n_val,
        "id": n_id,
        "ood": n_ood,
    }
    _check_partition(split, molecules)
    split.check_no_leakage(molecules)
    other = RandomSplitter(ood_size=0.1, seed=1).split(molecules, "y")
    assert other.sets["ood"].tolist() != split.sets["ood"].tolist()


def test_scaffold_split_keeps_each_scaffold_in_one_set(molecules: MoleculeTable) -> None:
    """Every Bemis–Murcko scaffold lies in exactly one set; groups too big for the held-out
    sets train; sets never exceed their sizes and, with enough singleton scaffolds to top
    them up, reach them exactly."""
    split = ScaffoldSplitter(ood_size=0.1, seed=0).split(molecules, "y")
    _check_partition(split, molecules)
    split.check_no_leakage(molecules)
    scaffold_of = {
        int(i): murcko_scaffold(str(s))
        for i, s in zip(molecules.mol_id, molecules.smiles, strict=True)
    }
    sets_of: dict[str, set[str]] = {}
    for name in SETS:
        for i in split.sets[name].tolist():
            sets_of.setdefault(scaffold_of[i], set()).add(name)
    spread = {s: names for s, names in sets_of.items() if len(names) > 1}
    assert not spread, f"scaffolds in several sets: {spread}"

    n_ood, n_id, n_val = _quotas(len(molecules), 0.1)
    group_size = Counter(scaffold_of.values())
    for scaffold, size in group_size.items():
        if size > max(n_ood, n_id, n_val) / 2:
            assert sets_of[scaffold] == {"train"}, scaffold
    assert sum(v == 1 for v in group_size.values()) >= n_ood + n_id + n_val
    assert split.sizes() == {
        "train": len(molecules) - n_ood - n_id - n_val,
        "val": n_val,
        "id": n_id,
        "ood": n_ood,
    }
    assert split.info["n_scaffolds"] == len(group_size)


@pytest.mark.parametrize("splitter_cls", [RandomSplitter, ScaffoldSplitter])
def test_control_splits_ignore_row_order(molecules: MoleculeTable, splitter_cls) -> None:
    """Random and scaffold splits depend on ids and seed, not on row order."""
    shuffled = molecules.take(np.random.default_rng(2).permutation(len(molecules)))
    splitter = splitter_cls(ood_size=0.1, seed=4)
    assert splitter.split(shuffled, "y").hash == splitter.split(molecules, "y").hash


# --------------------------------------------------------------------------- too small

TWELVE = MoleculeTable(
    "twelve",
    np.arange(12, dtype=np.int64),
    np.array(["C" * k for k in range(1, 13)]),  # acyclic: one (empty) scaffold
    {"y": np.arange(12.0)},
)


@pytest.mark.parametrize(
    ("splitter", "message"),
    [
        (
            KDETailSplitter(ood_size=2),  # rest 10: ID round(0.5) = 0
            "the kde_ood split of 12 molecules gives: train 9, val 1, id 0, ood 2; "
            "the id set is empty; raise split.id_fraction (now 0.05); or use more molecules",
        ),
        (
            RandomSplitter(ood_size=0),
            "the random split of 12 molecules gives: train 10, val 1, id 1, ood 0; "
            "the ood set is empty; raise task.ood_size (now 0); or use more molecules",
        ),
        (
            RandomSplitter(ood_size=6, id_fraction=0.5, val_fraction=0.99),
            "the random split of 12 molecules gives: train 0, val 3, id 3, ood 6; "
            "the train set is empty; lower task.ood_size (now 6), split.id_fraction "
            "(now 0.5) or split.val_fraction (now 0.99); or use more molecules",
        ),
        (
            ScaffoldSplitter(ood_size=0.25),  # the one scaffold group trains whole
            "the scaffold split of 12 molecules gives: train 12, val 0, id 0, ood 0; "
            "the val, id and ood sets are empty; raise split.val_fraction (now 0.1); "
            "raise split.id_fraction (now 0.05); raise task.ood_size (now 0.25); or use "
            "more molecules (scaffold groups larger than half the largest held-out set go "
            "to training whole)",
        ),
    ],
    ids=["kde-id", "random-ood", "random-train", "scaffold"],
)
def test_split_with_an_empty_set_is_refused(splitter: Splitter, message: str) -> None:
    """Every splitter's result is checked: the data set's size, every set's size, the
    empty sets and the settings to change."""
    with pytest.raises(EmptySetError) as error:
        splitter.split(TWELVE, "y")
    assert str(error.value) == message


def test_too_small_split_writes_no_split_file(make_csv, data_dir: Path) -> None:
    rows = [f"{'C' * k},{k}" for k in range(1, 13)]
    data = load_task(csv_task(str(make_csv("twelve.csv", "smiles,y", rows)), "y"), data_dir)
    splitter = KDETailSplitter(ood_size=2)
    with pytest.raises(EmptySetError, match="the id set is empty"):
        load_split(data, splitter, data_dir)
    assert not split_path(data, splitter, data_dir).exists()


# --------------------------------------------------------------------------- assignments


def _tiny_table() -> MoleculeTable:
    smiles = np.array(["CCO", "CCN", "CCC", "CCCl", "c1ccccc1", "CC"])
    return MoleculeTable("tiny", np.arange(6, dtype=np.int64), smiles, {"y": np.arange(6.0)})


def _assignment(**sets: list[int]) -> SplitAssignment:
    return SplitAssignment({name: np.array(sets.get(name, []), dtype=np.int64) for name in SETS})


def test_leakage_of_a_structure_is_refused() -> None:
    """The same canonical SMILES under two ids in two sets raises, naming the SMILES."""
    table = _tiny_table()
    clean = _assignment(train=[0, 1], val=[2], id=[3], ood=[4, 5])
    clean.check_no_leakage(table)
    twin = MoleculeTable("twin", table.mol_id, np.array([*table.smiles[:5], "CCO"]), table.targets)
    with pytest.raises(LeakageError, match=r"CCO \(train and ood\)"):
        clean.check_no_leakage(twin)


def test_a_molecule_in_two_sets_is_refused() -> None:
    """One id listed in two sets is leakage too."""
    with pytest.raises(LeakageError, match=r"CCC \(val and id\)"):
        _assignment(train=[0, 1], val=[2], id=[2, 3], ood=[4, 5]).check_no_leakage(_tiny_table())


def test_split_file_round_trip_and_tampering(tmp_path: Path) -> None:
    """write/read keeps sets, info and hash; a file with one id edited is refused."""
    split = KDETailSplitter(ood_size=0.1).split(synthetic_table(), "y")
    path = tmp_path / "split.json"
    split.write(path)
    back = SplitAssignment.read(path)
    assert back.hash == split.hash
    assert back.info == json.loads(json.dumps(split.info))
    for name in SETS:
        np.testing.assert_array_equal(back.sets[name], split.sets[name])

    payload = json.loads(path.read_text())
    payload["sets"]["ood"][0] = payload["sets"]["train"][0]
    path.write_text(json.dumps(payload))
    with pytest.raises(ValueError, match="does not match its hash"):
        SplitAssignment.read(path)


@pytest.fixture
def tiny_task(make_csv, data_dir: Path):
    """A 40-molecule task (linear alkanes and alcohols) loaded from a CSV file."""
    rows = [f"{'C' * k},{k * 0.5}" for k in range(1, 21)]
    rows += [f"{'C' * k}O,{k * 0.7 - 3}" for k in range(1, 21)]
    task = csv_task(str(make_csv("chains.csv", "smiles,y", rows)), "y")
    return load_task(task, data_dir, progress=False)


def _truncate(path: Path) -> None:
    path.write_text(path.read_text()[:50])


def _edit_an_id(path: Path) -> None:
    payload = json.loads(path.read_text())
    payload["sets"]["val"][0], payload["sets"]["id"][0] = (
        payload["sets"]["id"][0],
        payload["sets"]["val"][0] + 1000,
    )
    path.write_text(json.dumps(payload))


def _empty(path: Path) -> None:
    path.write_text("")


@pytest.mark.parametrize("damage", [_truncate, _edit_an_id, _empty])
def test_load_split_recomputes_a_damaged_file(tiny_task, data_dir: Path, damage, caplog) -> None:
    """load_split reuses a good file without recomputing, and replaces a damaged one by
    the same split as before."""
    splitter = KDETailSplitter(ood_size=0.1)
    first = load_split(tiny_task, splitter, data_dir)
    path = split_path(tiny_task, splitter, data_dir)
    assert SplitAssignment.read(path).hash == first.hash

    calls: list[int] = []
    original = splitter.split
    splitter.split = lambda *a: calls.append(1) or original(*a)  # type: ignore[method-assign]
    assert load_split(tiny_task, splitter, data_dir).hash == first.hash
    assert calls == []

    damage(path)
    again = load_split(tiny_task, splitter, data_dir)
    assert calls == [1]
    assert "recomputing" in caplog.text
    assert again.hash == first.hash
    assert again.info["task"] == tiny_task.task.name
    assert SplitAssignment.read(path).hash == first.hash
