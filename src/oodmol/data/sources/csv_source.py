"""Molecules from CSV files: the public 10k and Lipophilicity sets, or a user's own file."""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from oodmol.data.sources.base import RawData, Source
from oodmol.data.sources.fetch import RemoteFile
from oodmol.data.validation_report import DataReport
from oodmol.errors import UserError
from oodmol.io import file_digest


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
        limits: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(name, elements, limits)
        self.files = [_file_spec(f) for f in files]
        self.smiles_column = smiles_column
        self.target_columns = list(target_columns or [])

    def paths(self, data_dir: Path) -> list[Path]:
        return [f.resolve(data_dir) if isinstance(f, RemoteFile) else f for f in self.files]

    def read(self, data_dir: Path) -> RawData:
        report = DataReport(self.name)
        paths = self.paths(data_dir)
        self._check_columns({path: _header(path) for path in paths})
        merged: dict[int, tuple[str, dict[str, str]]] = {}
        unusable: dict[int, tuple[str, str]] = {}  # mol id -> (reason, where), once per row
        for path in paths:
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

    def _check_columns(self, headers: dict[Path, list[str]]) -> None:
        """Every file has the SMILES column and a target column, and every target column
        is in some file: checked on the headers, before any row is read."""
        for path, header in headers.items():
            # a file of molecules to predict has no target column
            has_target = not self.target_columns or bool(set(self.target_columns) & set(header))
            if self.smiles_column in header and has_target:
                continue
            missing = [] if self.smiles_column in header else [self.smiles_column]
            missing += [] if has_target else self.target_columns
            named = ", ".join(map(repr, missing))
            raise DataFileError(
                f"{path}: no column {named} (needs {self.smiles_column!r} and "
                f"{_one_of(self.target_columns)}); the file's columns are {header}"
                f"{delimiter_hint(header)}"
            )
        absent = [c for c in self.target_columns if not any(c in h for h in headers.values())]
        if absent:
            found = "; ".join(f"{path} has {header}" for path, header in headers.items())
            raise DataFileError(f"{self.name}: no file has the target column(s) {absent}: {found}")

    def _rows(
        self, path: Path, unusable: dict[int, tuple[str, str]]
    ) -> Iterator[tuple[int, str, dict[str, str]]]:
        """Data rows of one file; blank rows and rows without SMILES go to `unusable`."""
        with _csv_rows(path) as reader:
            header = [h.strip() for h in next(reader, [])]
            wanted = [self.smiles_column, *[c for c in self.target_columns if c in header]]
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


def read_smiles_column(path: Path, column: str) -> list[tuple[int, str]]:
    """(line number, SMILES) of every data row of a CSV file, blank cells included: a
    file of molecules to predict, where each row must come back with an answer."""
    header = _header(path)
    if column not in header:
        raise DataFileError(
            f"{path}: no column {column!r} (smiles_column=); the file's columns are {header}"
            f"{delimiter_hint(header)}"
        )
    index = header.index(column)
    with _csv_rows(path) as reader:
        next(reader, None)
        rows = [
            (reader.line_num, row[index].strip() if index < len(row) else "")
            for row in reader
            if any(cell.strip() for cell in row)
        ]
    if not rows:
        raise DataFileError(f"{path} has a header but no molecules: nothing to predict")
    return rows


class DataFileError(UserError, ValueError):
    """A source file that cannot be read as the data set: wrong columns, wrong delimiter,
    not UTF-8. Raised before any molecule is validated, naming the file."""


@contextmanager
def _csv_rows(path: Path) -> Iterator[Iterator[list[str]]]:
    """A CSV reader over a UTF-8 file (utf-8-sig: with or without the byte-order mark
    spreadsheets write); a byte that is not UTF-8 is named by line, not a traceback."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            yield csv.reader(handle)
    except UnicodeDecodeError:
        raise DataFileError(_not_utf8(path)) from None


def check_utf8(path: Path) -> None:
    """Refuse a file that is not UTF-8, naming the line and byte."""
    try:
        Path(path).read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise DataFileError(_not_utf8(path)) from None


def _not_utf8(path: Path) -> str:
    """Where the first byte that is not UTF-8 is. The decoding error of a text stream
    only knows its offset in one read-ahead chunk, so the file is decoded whole here."""
    advice = (
        "save the file with UTF-8 encoding (e.g. 'CSV UTF-8' in a spreadsheet program) "
        "and try again"
    )
    data = path.read_bytes()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        column = error.start - (data.rfind(b"\n", 0, error.start) + 1) + 1
        byte = data[error.start]
        return f"{path} line {line}: byte {column} (0x{byte:02x}) is not UTF-8; {advice}"
    return f"{path} changed while it was read and was not UTF-8 then; {advice}"


def _header(path: Path) -> list[str]:
    """The header row; a file with none (empty, or blank lines only) is refused."""
    with _csv_rows(path) as reader:
        header = [h.strip() for h in next(reader, [])]
    if not any(header):
        raise DataFileError(
            f"{path} is empty: it needs a header row (the column names, e.g. smiles,y) and a "
            "row per molecule"
        )
    return header


def _one_of(columns: list[str]) -> str:
    if len(columns) == 1:
        return f"the target column {columns[0]!r}"
    return f"one of the target columns {columns}"


def delimiter_hint(header: list[str]) -> str:
    """A one-column header that holds semicolons or tabs: a file saved with another
    delimiter (spreadsheets in many locales write semicolons)."""
    if len(header) != 1:
        return ""
    for name, delimiter in (("semicolon", ";"), ("tab", "\t")):
        if delimiter in header[0]:
            return f"; the file looks {name}-delimited, but it must be comma-separated"
    return ""


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
