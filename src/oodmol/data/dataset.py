"""A data set, validated once and cached as columnar files that reopen in milliseconds."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import rdkit

from oodmol.data.sources.base import Source
from oodmol.data.table import Geometry, MoleculeTable
from oodmol.data.validate import validate
from oodmol.data.validation_report import DataReport
from oodmol.interrupts import interruptible
from oodmol.io import atomic_write_dir, atomic_write_json
from oodmol.locks import build_lock
from oodmol.names import inside
from oodmol.parallel import global_rank

log = logging.getLogger(__name__)
FORMAT_VERSION = 2  # 2: duplicates with different targets reported as conflicts
_printed: set[str] = set()  # the data sets whose summary line this process printed


def load_dataset(
    source: Source, data_dir: Path, progress: bool = True
) -> tuple[MoleculeTable, DataReport]:
    """The validated table of a source and its report, from the cache when it is current.

    The cache is keyed by the raw content, the validation settings and the RDKit
    version (canonical SMILES can change between RDKit releases). A current cache is read
    without a lock or any write (it may sit on a read-only disk); the report's summary
    line is printed once per process.
    """
    data_dir = Path(data_dir)
    key = _cache_key(source, data_dir)
    folder = inside(data_dir, f"tables/{source.name}-{key}", "data set cache")
    cached, problem = _open(folder, key)
    if cached is None:
        cached = _build(source, data_dir, folder, key, problem, progress)
    print_once(str(folder), cached[1].summary_line())
    return cached


def print_once(key: str, line: str) -> None:
    """Print `line` the first time this process sees `key`, on global rank 0 only: a run
    loads its data from several hooks (prepare_data, setup), in every DDP process."""
    if key in _printed or global_rank() != 0:
        return
    _printed.add(key)
    print(line)


def _build(
    source: Source, data_dir: Path, folder: Path, key: str, problem: str | None, progress: bool
) -> tuple[MoleculeTable, DataReport]:
    """Validate the source into the cache `folder` under its build lock, unless another
    process has done it meanwhile. Stopped by SIGTERM or SIGINT, it raises `Interrupted`
    and leaves no temporary folder and no worker process behind."""
    with build_lock(Path(f"{folder}.lock"), f"data set cache {folder} {problem or 'is missing'}"):
        cached, problem = _open(folder, key)
        if cached is not None:
            return cached
        if problem is not None:
            log.warning("data set cache %s %s; rebuilding it", folder, problem)
        with interruptible(f"validating {source.name} into {folder}"):
            raw = source.read(data_dir)
            table, report = validate(raw, source.elements, progress=progress, limits=source.limits)
            atomic_write_dir(folder, lambda tmp: _write(tmp, key, table, report))
        cached, problem = _open(folder, key)
    if cached is None:
        raise RuntimeError(f"data set cache {folder} could not be read back: it {problem}")
    return cached


def _cache_key(source: Source, data_dir: Path) -> str:
    parts = {
        "format": FORMAT_VERSION,
        "name": source.name,
        "elements": source.elements,
        "limits": asdict(source.limits),
        "rdkit": rdkit.__version__,
        "source": source.fingerprint(data_dir),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def _write(folder: Path, key: str, table: MoleculeTable, report: DataReport) -> None:
    columns = {"mol_id": table.mol_id, "smiles": table.smiles.tolist()}
    columns.update({f"target:{k}": v for k, v in table.targets.items()})
    pq.write_table(pa.table(columns), folder / "table.parquet")
    if table.geometry is not None:
        g = table.geometry
        np.savez(
            folder / "geometry.npz",
            atomic_numbers=g.atomic_numbers,
            coords=g.coords,
            offsets=g.offsets,
        )
    report.write(folder / "report.json")
    # Written last: a folder without it is an unfinished build.
    atomic_write_json(folder / "meta.json", {"key": key, "version": table.version})


def _open(folder: Path, key: str) -> tuple[tuple[MoleculeTable, DataReport] | None, str | None]:
    """The cached table and report, or None and what is wrong with the cache (None when
    there is none). Reads only: a damaged folder is replaced by the next build."""
    if not folder.exists():
        return None, None
    try:
        meta = json.loads((folder / "meta.json").read_text())
        if meta["key"] != key:
            raise ValueError("stale key")
        frame = pq.read_table(folder / "table.parquet")
        geometry = None
        if (folder / "geometry.npz").exists():
            with np.load(folder / "geometry.npz", allow_pickle=False) as npz:
                geometry = Geometry(npz["atomic_numbers"], npz["coords"], npz["offsets"])
        table = MoleculeTable(
            name=folder.name.rsplit("-", 1)[0],
            mol_id=frame["mol_id"].to_numpy(),
            smiles=np.array(frame["smiles"].to_pylist(), dtype=str),
            targets={
                name.split(":", 1)[1]: frame[name].to_numpy()
                for name in frame.column_names
                if name.startswith("target:")
            },
            geometry=geometry,
        )
        if table.version != meta["version"]:
            raise ValueError("content hash differs from the one recorded at build time")
        report = DataReport.from_dict(json.loads((folder / "report.json").read_text()))
    except Exception as error:  # any damage means: rebuild, never a wrong answer
        return None, f"is damaged ({error!r})"
    return (table, report), None
