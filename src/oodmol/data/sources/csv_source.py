"""Molecules from CSV files: the public 10k and Lipophilicity sets, or a user's own file."""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from oodmol.data.report import DataReport
from oodmol.data.sources.base import RawData, Source
from oodmol.data.sources.fetch import RemoteFile, file_digest


class CSVSource(Source):
    """One or more CSV files whose rows are the same molecules in the same order.

    The 10k CSD set ships density and heat of formation as two files; reading them as
    one data set lets both tasks share one feature cache. The molecule id of a row is
    its position among the data rows (the first row after the header is 0), so id k is
    found on line k + 2 of the file.
    """

    def __init__(
        self,
        name: str,
        files: list[dict],
        smiles_column: str = "smiles",
        target_columns: list[str] | None = None,
        elements: list[str] | None = None,
    ) -> None:
        super().__init__(name, elements)
        self.files = [_file_spec(f) for f in files]
        self.smiles_column = smiles_column
        self.target_columns = list(target_columns or [])

    def paths(self, data_dir: Path) -> list[Path]:
        return [f.resolve(data_dir) if isinstance(f, RemoteFile) else f for f in self.files]

    def read(self, data_dir: Path) -> RawData:
        report = DataReport(self.name)
        merged: dict[int, tuple[str, dict[str, str]]] = {}
        unusable: dict[int, tuple[str, str]] = {}  # mol id -> (reason, where), once per row
        for path in self.paths(data_dir):
            for mol_id, smiles, cells in self._rows(path, unusable):
                if mol_id not in merged:
                    merged[mol_id] = (smiles, {})
                elif merged[mol_id][0] != smiles:
                    raise ValueError(
                        f"{path} line {mol_id + 2}: SMILES {smiles!r} differs from "
                        f"{merged[mol_id][0]!r} in the first file; the files must list the "
                        "same molecules in the same order"
                    )
                merged[mol_id][1].update(cells)
        for mol_id, (reason, where) in sorted(unusable.items()):
            merged.pop(mol_id, None)
            report.record(reason, "dropped", where)
        ids = np.array(sorted(merged), dtype=np.int64)
        targets = {
            column: np.array(
                [_to_float(merged[i][1].get(column, ""), column, int(i), report) for i in ids],
                dtype=np.float64,
            )
            for column in self.target_columns
        }
        report.n_read = len(ids) + report.count("dropped")
        return RawData(ids, [merged[i][0] for i in ids], targets, None, report)

    def _rows(
        self, path: Path, unusable: dict[int, tuple[str, str]]
    ) -> Iterator[tuple[int, str, dict[str, str]]]:
        """Data rows of one file; blank rows and rows without SMILES go to `unusable`.

        utf-8-sig reads files with or without the byte-order mark spreadsheets write."""
        with open(path, newline="", encoding="utf-8-sig") as handle:
            reader = csv.reader(handle)
            header = [h.strip() for h in next(reader, [])]
            wanted = [self.smiles_column, *[c for c in self.target_columns if c in header]]
            missing = [c for c in wanted if c not in header]
            if self.smiles_column not in header or not any(
                c in header for c in self.target_columns
            ):
                raise ValueError(
                    f"{path}: needs columns {self.smiles_column!r} and one of "
                    f"{self.target_columns}; header is {header} (missing {missing})"
                )
            index = {c: header.index(c) for c in wanted}
            for row in reader:
                mol_id = reader.line_num - 2
                where = f"{path.name} line {reader.line_num}"
                if not any(cell.strip() for cell in row):
                    unusable.setdefault(mol_id, ("blank line", where))
                    continue
                if len(row) < len(header):
                    row = row + [""] * (len(header) - len(row))
                smiles = row[index[self.smiles_column]].strip()
                if not smiles:
                    unusable.setdefault(mol_id, ("empty SMILES", where))
                    continue
                cells = {c: row[index[c]].strip() for c in wanted if c != self.smiles_column}
                yield mol_id, smiles, cells

    def fingerprint(self, data_dir: Path) -> dict:
        return {
            "files": [str(p) for p in self.paths(data_dir)],
            "sha256": [file_digest(p, "sha256") for p in self.paths(data_dir)],
            "smiles_column": self.smiles_column,
            "target_columns": self.target_columns,
        }


def _file_spec(spec: dict | str) -> RemoteFile | Path:
    if isinstance(spec, str):
        return Path(spec).expanduser()
    spec = dict(spec)
    if "path" in spec:
        return Path(spec["path"]).expanduser()
    spec["rename"] = dict(spec.get("rename") or {})
    return RemoteFile(**spec)


def _to_float(cell: str, column: str, mol_id: int, report: DataReport) -> float:
    """A target cell as a number; an empty or non-numeric cell becomes NaN, reported here
    and dropped from the task that uses this column."""
    where = f"mol {mol_id} (line {mol_id + 2})"
    if cell == "":
        report.record(f"empty {column} value", "unreadable", where)
        return math.nan
    try:
        return float(cell)
    except ValueError:
        report.record(f"non-numeric {column} value", "unreadable", where, repr(cell))
        return math.nan
