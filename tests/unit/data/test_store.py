import json
import logging
import multiprocessing
import os
import struct
import time
import zlib
from pathlib import Path

import lmdb
import numpy as np
import pytest
from rdkit import Chem

from oodmol.data.featurize.base import Featurizer, MolInput
from oodmol.data.featurize.descriptors import RDKitDescriptors
from oodmol.data.featurize.fingerprints import MorganFingerprint
from oodmol.data.records import decode_arrays, encode_arrays
from oodmol.data.store import FeatureStore
from oodmol.data.table import Geometry, MoleculeTable

SMILES = ["C", "CC", "CCO", "c1ccccc1", "CC(=O)O", "[Na+].[Cl-]", "CCN", "OCCO", "C1CC1", "CCCl"]
MOL_IDS = np.array([5, -3, 100, 0, 7, 2**40, 12, -1, 3, 9])  # unsorted, negatives


def make_table(name="t", smiles=SMILES):
    n = len(smiles)
    return MoleculeTable(name, MOL_IDS[:n], np.array(smiles), {"y": np.zeros(n)})


class CountingFeaturizer(Featurizer):
    """Logs every call to a file per process, so calls can be counted across processes."""

    name = "counting"

    def __init__(self, log_dir: str, scale: float = 1.0, delay: float = 0.0) -> None:
        self.log_dir, self.scale, self.delay = log_dir, scale, delay

    def params(self) -> dict:
        return {"scale": self.scale}

    def __call__(self, mol: MolInput) -> dict[str, np.ndarray]:
        with open(Path(self.log_dir) / f"{os.getpid()}.log", "a") as f:
            f.write(mol.smiles + "\n")
        time.sleep(self.delay)
        return {"x": expected(mol.smiles, self.scale)}


def n_calls(log_dir: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in log_dir.glob("*.log"))


def expected(smiles: str, scale: float = 1.0) -> np.ndarray:
    """Features of the counting featuriser: NaN for chlorides, to count non-finite values."""
    n_atoms = Chem.MolFromSmiles(smiles).GetNumAtoms()
    return np.array([n_atoms, len(smiles), np.nan if "Cl" in smiles else 1]) * scale


@pytest.fixture
def calls(tmp_path) -> Path:
    path = tmp_path / "calls"
    path.mkdir()
    return path


def build(featurizer, cache, table=None, **kwargs) -> FeatureStore:
    return FeatureStore.build_or_open(
        featurizer, make_table() if table is None else table, cache, progress=False, **kwargs
    )


def test_build_then_reopen_without_recomputing(tmp_path, calls):
    table = make_table()
    store = build(CountingFeaturizer(str(calls)), tmp_path / "cache", n_jobs=1)
    assert n_calls(calls) == len(table) == len(store)
    np.testing.assert_array_equal(store.get(100)["x"], expected("CCO"))

    again = build(CountingFeaturizer(str(calls)), tmp_path / "cache", n_jobs=1)
    assert n_calls(calls) == len(table)
    assert again.path == store.path and again.meta == store.meta
    ids = MOL_IDS[[3, 0, 9, 1]]
    matrix = again.matrix(ids)
    np.testing.assert_array_equal(matrix, [expected(SMILES[i]) for i in (3, 0, 9, 1)])
    assert again.matrix([]).shape == (0, 3)

    meta = store.meta
    assert meta["n_entries"] == len(table)
    assert meta["n_nonfinite_molecules"] == 2 and meta["n_nonfinite_values"] == 2
    assert sorted(meta["nonfinite_examples"]) == sorted(MOL_IDS[[5, 9]].tolist())
    assert store.path.name.startswith("t-counting-") and store.path.suffix == ".lmdb"


def test_missing_ids_raise(tmp_path, calls):
    store = build(CountingFeaturizer(str(calls)), tmp_path, n_jobs=1)
    with pytest.raises(KeyError):
        store.get(4)
    with pytest.raises(KeyError):
        store.matrix([5, 4])
    with pytest.raises(KeyError):
        store.matrix([5], field="pos")


def test_changed_params_or_molecules_build_a_new_file(tmp_path, calls):
    first = build(CountingFeaturizer(str(calls)), tmp_path, n_jobs=1)
    scaled = build(CountingFeaturizer(str(calls), scale=2.0), tmp_path, n_jobs=1)
    fewer = build(CountingFeaturizer(str(calls)), tmp_path, make_table(smiles=SMILES[:4]), n_jobs=1)
    assert len({first.path, scaled.path, fewer.path}) == 3
    assert n_calls(calls) == 2 * len(SMILES) + 4
    np.testing.assert_array_equal(scaled.get(100)["x"], expected("CCO", 2.0))
    np.testing.assert_array_equal(first.get(100)["x"], expected("CCO"))


def overwrite_middle(path: Path) -> None:
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.seek(size // 2)
        f.write(b"\xff" * 64)


def truncate(path: Path) -> None:
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 2)


@pytest.mark.parametrize(
    ("damage", "message"), [(overwrite_middle, "corrupted"), (truncate, "truncated")]
)
def test_damaged_cache_is_rebuilt(tmp_path, calls, caplog, damage, message):
    store = build(CountingFeaturizer(str(calls)), tmp_path, n_jobs=1)
    damage(store.path)
    with caplog.at_level(logging.WARNING, logger="oodmol.data.store"):
        rebuilt = build(CountingFeaturizer(str(calls)), tmp_path, n_jobs=1)
    assert message in caplog.text and "rebuilding" in caplog.text
    assert n_calls(calls) == 2 * len(SMILES)
    np.testing.assert_array_equal(rebuilt.matrix(MOL_IDS), [expected(s) for s in SMILES])


def write_unfinished(path: Path, seal: bool) -> None:
    """What a build killed before its meta record would leave, had it written in place."""
    env = lmdb.open(str(path), subdir=False, lock=False)
    with env.begin(write=True) as txn:
        txn.put(struct.pack(">q", 5), encode_arrays({"x": np.zeros(3)}))
    env.close()
    if seal:
        crc = zlib.crc32(path.read_bytes())
        path.with_name(path.name + ".seal").write_text(
            json.dumps({"size": path.stat().st_size, "crc32": crc})
        )


@pytest.mark.parametrize(
    ("leftover", "message"),
    [("temp", "interrupted"), ("unsealed", "no seal"), ("no_meta", "no __meta__")],
)
def test_interrupted_build_is_rebuilt(tmp_path, calls, caplog, leftover, message):
    path = build(CountingFeaturizer(str(calls)), tmp_path, n_jobs=1).path
    path.unlink()
    path.with_name(path.name + ".seal").unlink()
    if leftover == "temp":
        temp = path.with_name(path.name + ".tmp-99999-deadbeef")
        temp.write_bytes(b"half a cache")
    else:
        write_unfinished(path, seal=leftover == "no_meta")
    with caplog.at_level(logging.WARNING, logger="oodmol.data.store"):
        store = build(CountingFeaturizer(str(calls)), tmp_path, n_jobs=1)
    assert message in caplog.text
    assert n_calls(calls) == 2 * len(SMILES)
    np.testing.assert_array_equal(store.matrix(MOL_IDS), [expected(s) for s in SMILES])
    assert not list(tmp_path.glob("*.tmp-*"))


def race(cache: str, log_dir: str, out: str, barrier) -> None:
    barrier.wait()
    store = build(CountingFeaturizer(log_dir, delay=0.05), cache, n_jobs=1)
    np.save(out, store.matrix(MOL_IDS))


def test_racing_builds_featurise_once(tmp_path, calls):
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2)
    outs = [tmp_path / f"out{i}.npy" for i in range(2)]
    workers = [
        context.Process(target=race, args=(str(tmp_path / "cache"), str(calls), str(out), barrier))
        for out in outs
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert [worker.exitcode for worker in workers] == [0, 0]
    assert n_calls(calls) == len(SMILES)
    first, second = (np.load(out) for out in outs)
    np.testing.assert_array_equal(first, second)
    np.testing.assert_array_equal(first, [expected(s) for s in SMILES])


def test_parallel_build_matches_serial(tmp_path):
    serial = build(RDKitDescriptors(), tmp_path / "serial", n_jobs=1)
    parallel = build(RDKitDescriptors(), tmp_path / "parallel", n_jobs=2)
    np.testing.assert_array_equal(serial.matrix(MOL_IDS), parallel.matrix(MOL_IDS))
    assert serial.meta["n_nonfinite_molecules"] == parallel.meta["n_nonfinite_molecules"] > 0
    assert build(RDKitDescriptors(), tmp_path / "serial").meta == serial.meta


def test_failing_featurizer_names_the_molecule_and_leaves_no_cache(tmp_path):
    table = make_table(smiles=["CC", "not a smiles", "CCO"])
    with pytest.raises(RuntimeError, match=r"mol_id -3 \(not a smiles\)"):
        build(MorganFingerprint(), tmp_path, table, n_jobs=1)
    # the molecules before it (in key order: 5, 100, then -3) are kept in the journal
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".journal", ".lock"]


class GraphFeaturizer(Featurizer):
    """Several arrays per molecule, of varying shapes and of int and float dtypes."""

    name = "graph"

    def params(self) -> dict:
        return {}

    def __call__(self, mol: MolInput) -> dict[str, np.ndarray]:
        rd_mol = Chem.MolFromSmiles(mol.smiles)
        bonds = [(b.GetBeginAtomIdx(), b.GetEndAtomIdx()) for b in rd_mol.GetBonds()]
        edges = np.array(bonds + [(j, i) for i, j in bonds], dtype=np.int64).reshape(-1, 2)
        return {
            "x": np.array(
                [[a.GetAtomicNum(), a.GetDegree()] for a in rd_mol.GetAtoms()], np.float32
            ),
            "edge_index": edges.T.copy(),
            "z": mol.atomic_numbers,
            "pos": mol.coords,
            "n_atoms": np.array(rd_mol.GetNumAtoms(), dtype=np.int16),
        }


def test_multi_array_molecules_round_trip(tmp_path):
    smiles = ["C", "CO", "OCCO"]
    n_atoms = [1, 2, 4]
    rng = np.random.default_rng(0)
    geometry = Geometry(
        atomic_numbers=np.array([6, 6, 8, 8, 6, 6, 8], dtype=np.int8),
        coords=rng.normal(size=(7, 3)).astype(np.float32),
        offsets=np.array([0, *np.cumsum(n_atoms)]),
    )
    table = MoleculeTable("g", np.array([1, 2, 3]), np.array(smiles), {}, geometry)
    store = build(GraphFeaturizer(), tmp_path, table, n_jobs=1)
    for row, mol_id in enumerate(table.mol_id):
        want = GraphFeaturizer()(MolInput(smiles[row], *geometry.molecule(row)))
        got = store.get(mol_id)
        assert list(got) == list(want)
        for name in want:
            assert got[name].dtype == want[name].dtype and got[name].shape == want[name].shape
            np.testing.assert_array_equal(got[name], want[name])
            assert got[name].flags.aligned
    assert store.get(1)["edge_index"].shape == (2, 0)
    assert store.get(3)["x"].flags.writeable
    np.testing.assert_array_equal(store.matrix([1, 2, 3], field="n_atoms"), n_atoms)
    with pytest.raises(ValueError, match="varying shapes"):
        store.matrix([1, 2], field="pos")


def test_values_are_length_prefixed_json_not_pickle(tmp_path, calls):
    store = build(CountingFeaturizer(str(calls)), tmp_path, n_jobs=1)
    env = lmdb.open(str(store.path), subdir=False, readonly=True, lock=False)
    with env.begin() as txn:
        raw = txn.get(struct.pack(">q", 100))
        meta = json.loads(txn.get(b"__meta__"))
    env.close()
    (n,) = struct.unpack_from("<I", raw)
    assert json.loads(raw[4 : 4 + n]) == [["x", "<f8", [3], 0]]
    assert len(raw) == 4 + n + 3 * 8 and (4 + n) % 8 == 0
    assert not raw.startswith(b"\x80")  # pickle's protocol marker
    assert meta == store.meta
    with pytest.raises(TypeError):
        encode_arrays({"x": np.array(["a"], dtype=object)})
    scalar = decode_arrays(encode_arrays({"s": np.float32(1.5), "e": np.zeros((0, 3))}))
    assert scalar["s"].shape == () and scalar["s"] == 1.5 and scalar["e"].shape == (0, 3)


def read_in_child(store: FeatureStore, out: str) -> None:
    np.save(out, store.matrix(MOL_IDS))


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_store_reads_in_worker_processes(tmp_path, calls, method):
    """Like DataLoader workers: inheriting an open handle (fork) or unpickling (spawn)."""
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"no {method} on this platform")
    store = build(CountingFeaturizer(str(calls)), tmp_path, n_jobs=1)
    again = build(CountingFeaturizer(str(calls)), tmp_path, n_jobs=1)  # same file, one handle
    np.testing.assert_array_equal(again.get(5)["x"], store.get(5)["x"])
    out = tmp_path / "child.npy"
    child = multiprocessing.get_context(method).Process(
        target=read_in_child, args=(store, str(out))
    )
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0
    np.testing.assert_array_equal(np.load(out), store.matrix(MOL_IDS))
    np.testing.assert_array_equal(store.get(5)["x"], expected("C"))  # parent's handle still works
