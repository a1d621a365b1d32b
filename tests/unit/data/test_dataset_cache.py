"""The data set cache: built once, reopened without reading the source, and rebuilt (never
trusted, never a crash) when damaged or when the source changes."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import oodmol.data.dataset as dataset_module
from oodmol.data.dataset import load_dataset
from oodmol.data.sources.base import RawData, Source
from oodmol.data.sources.csv_source import CSVSource
from oodmol.data.table import Geometry, MoleculeTable
from oodmol.data.validation_report import DataReport

ROWS = ["CCO,1.0", "c1ccccc1,2.5", "CC(=O)O,-0.5", "C1CC,3.0", "CCN,4.0", "OCC,9.0"]
KEPT = [0, 1, 2, 4]  # mol 3 does not parse, mol 5 repeats mol 0


class CountingSource(CSVSource):
    """A CSV source that counts how often it is read."""

    def __init__(self, path: Path) -> None:
        super().__init__("tiny", files=[str(path)], target_columns=["y"], elements=None)
        self.reads = 0

    def read(self, data_dir: Path) -> RawData:
        self.reads += 1
        return super().read(data_dir)


@pytest.fixture
def source(make_csv) -> CountingSource:
    return CountingSource(make_csv("tiny.csv", "smiles,y", ROWS))


def _folder(data_dir: Path) -> Path:
    (folder,) = [p for p in (data_dir / "tables").iterdir() if p.is_dir() and p.name[0] != "."]
    return folder


def _same(a: MoleculeTable, b: MoleculeTable) -> None:
    assert a.mol_id.tolist() == b.mol_id.tolist()
    assert a.smiles.tolist() == b.smiles.tolist()
    assert a.targets.keys() == b.targets.keys()
    for k in a.targets:
        np.testing.assert_array_equal(a.targets[k], b.targets[k])
    assert a.version == b.version


def test_second_load_reads_the_cache(source: CountingSource, data_dir: Path, monkeypatch) -> None:
    """The second load neither reads the source nor validates; it returns the same table
    and report, named after the source."""
    table, report = load_dataset(source, data_dir, progress=False)
    assert source.reads == 1
    assert table.mol_id.tolist() == KEPT
    assert table.targets["y"].tolist() == [1.0, 2.5, -0.5, 4.0]

    def no_validation(*args, **kwargs):
        raise AssertionError("validate() called on a cached data set")

    monkeypatch.setattr(dataset_module, "validate", no_validation)
    again, again_report = load_dataset(source, data_dir, progress=False)
    assert source.reads == 1
    _same(table, again)
    assert again.name == "tiny"
    assert again_report.to_dict() == report.to_dict()


def _delete_table(folder: Path) -> None:
    (folder / "table.parquet").unlink()


def _garble_table(folder: Path) -> None:
    (folder / "table.parquet").write_bytes(b"PAR1 this is not parquet PAR1")


def _garble_meta(folder: Path) -> None:
    (folder / "meta.json").write_text('{"key": "')


def _delete_meta(folder: Path) -> None:
    (folder / "meta.json").unlink()


def _garble_report(folder: Path) -> None:
    (folder / "report.json").write_text("[]")


def _edit_a_target(folder: Path) -> None:
    """Valid parquet with one value changed, meta.json untouched: the recorded version no
    longer matches the content."""
    frame = pq.read_table(folder / "table.parquet")
    y = frame["target:y"].to_numpy().copy()
    y[0] += 1.0
    index = frame.column_names.index("target:y")
    pq.write_table(frame.set_column(index, "target:y", pa.array(y)), folder / "table.parquet")


def _wrong_version(folder: Path) -> None:
    meta = json.loads((folder / "meta.json").read_text())
    meta["version"] = "0123456789abcdef"
    (folder / "meta.json").write_text(json.dumps(meta))


@pytest.mark.parametrize(
    "damage",
    [
        _delete_table,
        _garble_table,
        _garble_meta,
        _delete_meta,
        _garble_report,
        _edit_a_target,
        _wrong_version,
    ],
)
def test_damaged_cache_is_rebuilt(
    source: CountingSource, data_dir: Path, damage: Callable[[Path], None], caplog
) -> None:
    """Any damage to the cached folder means a rebuild from the source, with a warning,
    and the rebuilt table equals the original one."""
    table, _ = load_dataset(source, data_dir, progress=False)
    damage(_folder(data_dir))
    rebuilt, _ = load_dataset(source, data_dir, progress=False)
    assert source.reads == 2
    _same(table, rebuilt)
    assert "rebuilding" in caplog.text
    # and the rebuilt cache is good again
    load_dataset(source, data_dir, progress=False)
    assert source.reads == 2


def test_leftover_temporary_folder_is_ignored(source: CountingSource, data_dir: Path) -> None:
    """A half-written `.tmp` sibling from a killed build neither stops a build nor is
    mistaken for a finished cache."""
    table, _ = load_dataset(source, data_dir, progress=False)
    folder = _folder(data_dir)
    leftover = folder.parent / f".{folder.name}.killed.tmp"
    shutil.copytree(folder, leftover)
    (leftover / "meta.json").unlink()
    (leftover / "table.parquet").write_bytes(b"half")
    shutil.rmtree(folder)

    rebuilt, _ = load_dataset(source, data_dir, progress=False)
    assert source.reads == 2
    _same(table, rebuilt)
    assert _folder(data_dir) == folder


def test_changed_source_file_gives_a_fresh_table(
    source: CountingSource, data_dir: Path, make_csv
) -> None:
    """New content in the source file (same path) changes the cache key: the new values
    are read, not the cached ones."""
    first, _ = load_dataset(source, data_dir, progress=False)
    make_csv("tiny.csv", "smiles,y", [*ROWS[:2], "CC(=O)O,7.25", *ROWS[3:]])
    second, _ = load_dataset(source, data_dir, progress=False)
    assert source.reads == 2
    assert second.targets["y"].tolist() == [1.0, 2.5, 7.25, 4.0]
    assert second.version != first.version
    # the old content, back again, is served from its own (still valid) cache
    make_csv("tiny.csv", "smiles,y", ROWS)
    third, _ = load_dataset(source, data_dir, progress=False)
    assert source.reads == 2
    _same(first, third)


class GeometrySource(Source):
    """Three molecules with 3D atoms (QM9-like), the middle one with a wrong formula."""

    def __init__(self) -> None:
        super().__init__("geo", elements=["C", "H", "O"])
        self.reads = 0

    def read(self, data_dir: Path) -> RawData:
        self.reads += 1
        numbers = [[8, 1, 1], [6, 1, 1], [6, 1, 1, 1, 1]]  # water, "CH2" for C, methane
        counts = [len(z) for z in numbers]
        flat = np.array([z for zs in numbers for z in zs], dtype=np.int8)
        return RawData(
            mol_id=np.array([1, 2, 3], dtype=np.int64),
            smiles=["O", "C", "C"],
            targets={"t": np.array([0.5, 1.5, 2.5])},
            geometry=Geometry(
                flat,
                np.linspace(-1, 1, 3 * len(flat), dtype=np.float32).reshape(-1, 3),
                np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
            ),
            report=DataReport(self.name),
        )

    def fingerprint(self, data_dir: Path) -> dict:
        return {"version": 1}


def test_geometry_survives_the_cache(data_dir: Path) -> None:
    """Per-atom arrays come back from the cache bit for bit (dtypes included); a damaged
    or missing geometry file means a rebuild."""
    source = GeometrySource()
    table, _ = load_dataset(source, data_dir, progress=False)
    assert table.mol_id.tolist() == [1, 3]
    again, _ = load_dataset(source, data_dir, progress=False)
    assert source.reads == 1
    _same(table, again)
    for name in ("atomic_numbers", "coords", "offsets"):
        built, cached = getattr(table.geometry, name), getattr(again.geometry, name)
        assert cached.dtype == built.dtype
        np.testing.assert_array_equal(cached, built)
    assert again.geometry.molecule(1)[0].tolist() == [6, 1, 1, 1, 1]

    (_folder(data_dir) / "geometry.npz").write_bytes(b"not a zip file")
    rebuilt, _ = load_dataset(source, data_dir, progress=False)
    assert source.reads == 2
    np.testing.assert_array_equal(rebuilt.geometry.coords, table.geometry.coords)
    (_folder(data_dir) / "geometry.npz").unlink()  # would silently give geometry=None
    rebuilt, _ = load_dataset(source, data_dir, progress=False)
    assert source.reads == 3
    assert rebuilt.geometry is not None
