"""Validation known answers: which records survive, and the report naming every one that
does not.

Relied on (CSVSource's documented contract): the molecule id of a data row is its line
number minus 2 (the first row after the header is mol 0), blank lines included, so ids
stay the row positions of the source file even where lines are skipped.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rdkit import Chem

from oodmol.data.sources.base import RawData
from oodmol.data.sources.csv_source import CSVSource, DataFileError
from oodmol.data.table import Geometry
from oodmol.data.task import Task, load_task
from oodmol.data.validate import validate
from oodmol.data.validation_report import DataReport

CHNO = ["C", "H", "N", "O"]

# (row, why it is there); row k is mol id k, on line k + 2.
ROWS = [
    "CCO,1.0",  # 0: good
    "C1CC,2.0",  # 1: unclosed ring: unparseable
    "C(C)(C)(C)(C)C,3.0",  # 2: pentavalent carbon: sanitisation fails
    "c1ccccc1,",  # 3: empty target cell (kept in the data set, dropped by the task)
    "CCN,abc",  # 4: text target (likewise)
    "CCCC,nan",  # 5: NaN target (likewise, and not an unreadable cell)
    "",  # 6: blank line (line 8)
    ",4.0",  # 7: empty SMILES (line 9)
    "OCC,5.0",  # 8: the structure of mol 0 written differently, with another target
    "C[NH3+].CC(=O)[O-],6.0",  # 9: a CHNO salt: two fragments, kept
    "CC(=O)[O-].[Na+],6.5",  # 10: a sodium salt: two fragments, Na outside CHNO
    "CCCl,7.0",  # 11: Cl outside CHNO
    "C(=O)O,9.0",  # 12: good, not written canonically
]


@pytest.fixture
def bad_csv(make_csv) -> Path:
    return make_csv("bad.csv", "smiles,y", ROWS)


def _validate(path: Path, elements: list[str] | None):
    source = CSVSource("bad", files=[str(path)], target_columns=["y"], elements=elements)
    return validate(source.read(path.parent), source.elements, progress=False)


def _finding(report: DataReport, action: str, reason: str):
    finding = report.findings.get(f"{action}:{reason}")
    assert finding is not None, f"no {action}:{reason} in {list(report.findings)}"
    return finding


def test_validation_keeps_exactly_the_valid_molecules(bad_csv: Path) -> None:
    """Without an element filter: unparseable, invalid, blank, SMILES-less and duplicate
    rows go; bad target cells stay (NaN) for the task to drop; salts stay, reported."""
    table, report = _validate(bad_csv, elements=None)
    assert table.mol_id.tolist() == [0, 3, 4, 5, 9, 10, 11, 12]
    y = table.targets["y"]
    assert y[:1].tolist() == [1.0] and y[4:].tolist() == [6.0, 6.5, 7.0, 9.0]
    assert np.isnan(y[1:4]).all()
    assert report.n_read == 13
    assert report.n_kept == 8
    assert report.n_kept + report.n_dropped == report.n_read


def test_validation_report_names_every_bad_row(bad_csv: Path) -> None:
    """Each bad row appears under the right reason and action, with its id or line."""
    _, report = _validate(bad_csv, elements=None)
    expected = {
        ("dropped", "unparseable SMILES"): ["mol 1: 'C1CC'"],
        ("dropped", "RDKit sanitisation failed: AtomValenceException"): ["mol 2: 'C(C)(C)(C)(C)C'"],
        ("unreadable", "empty y value"): ["mol 3 (line 5)"],
        ("unreadable", "non-numeric y value"): ["mol 4 (line 6): 'abc'"],
        ("dropped", "blank line"): ["bad.csv line 8"],
        ("dropped", "empty SMILES"): ["bad.csv line 9"],
        ("dropped", "duplicate structure with a different target"): [
            "mol 8: same as mol 0; y 1.0 (mol 0) vs 5.0 (mol 8)"
        ],
        ("kept", "several fragments"): [
            "mol 9: CC(=O)[O-].C[NH3+]",
            "mol 10: CC(=O)[O-].[Na+]",
        ],
    }
    for (action, reason), examples in expected.items():
        finding = _finding(report, action, reason)
        assert finding.count == len(examples), (action, reason)
        assert finding.examples == examples, (action, reason)
    # two rows were rewritten into canonical form: the CHNO salt and formic acid
    assert _finding(report, "changed", "canonical SMILES").count == 2
    # a NaN cell is a number, not an unreadable one: mol 5 is named nowhere yet
    assert not any("mol 5" in e for f in report.findings.values() for e in f.examples)
    assert set(report.findings) == {f"{a}:{r}" for a, r in expected} | {"changed:canonical SMILES"}


def test_element_filter_drops_and_names_the_foreign_element(bad_csv: Path) -> None:
    """elements=[C,H,N,O] also drops the Na salt and the chloride, naming the element;
    the CHNO salt stays."""
    table, report = _validate(bad_csv, elements=CHNO)
    assert table.mol_id.tolist() == [0, 3, 4, 5, 9, 12]
    finding = _finding(report, "dropped", "element outside ['C', 'H', 'N', 'O']")
    assert finding.count == 2
    assert finding.examples == ["mol 10: Na", "mol 11: Cl"]
    assert _finding(report, "kept", "several fragments").examples == ["mol 9: CC(=O)[O-].C[NH3+]"]
    assert (report.n_read, report.n_kept, report.n_dropped) == (13, 6, 7)


def test_smiles_are_rdkit_canonical(bad_csv: Path) -> None:
    """Kept SMILES are RDKit's canonical form of the source SMILES of the same id."""
    table, _ = _validate(bad_csv, elements=None)
    for mol_id, smiles in zip(table.mol_id, table.smiles, strict=True):
        source_smiles = ROWS[mol_id].split(",")[0]
        assert smiles == Chem.MolToSmiles(Chem.MolFromSmiles(source_smiles))
        assert Chem.MolToSmiles(Chem.MolFromSmiles(smiles)) == smiles
    assert dict(zip(table.mol_id.tolist(), table.smiles.tolist(), strict=True))[12] == "O=CO"


def test_summary_line_has_the_counts(bad_csv: Path) -> None:
    """The one-line summary printed to users states read/kept and each finding's count."""
    _, report = _validate(bad_csv, elements=CHNO)
    line = report.summary_line()
    assert "bad: read 13, kept 6" in line
    assert "1 dropped (unparseable SMILES)" in line
    assert "1 dropped (duplicate structure with a different target)" in line
    assert "2 dropped (element outside" in line
    assert "1 unreadable (non-numeric y value)" in line


def test_load_task_drops_rows_without_a_finite_target(bad_csv: Path, data_dir: Path) -> None:
    """A task keeps only molecules with a finite target and names the other ones;
    its report still accounts for every row read."""
    source = CSVSource("bad", files=[str(bad_csv)], target_columns=["y"], elements=CHNO)
    task = Task(
        name="bad-y",
        source=source,
        target="y",
        property="y",
        units="",
        extensive=False,
        description="",
        ood_size=0.1,
    )
    data = load_task(task, data_dir, progress=False)
    assert data.table.mol_id.tolist() == [0, 9, 12]
    assert data.y.tolist() == [1.0, 6.0, 9.0]
    assert data.table.smiles.tolist() == ["CCO", "CC(=O)[O-].C[NH3+]", "O=CO"]
    assert data.dataset.mol_id.tolist() == [0, 3, 4, 5, 9, 12]
    finding = _finding(data.report, "dropped", "non-finite y")
    assert finding.count == 3
    assert [e.split(":")[0] for e in finding.examples] == ["mol 3", "mol 4", "mol 5"]
    report = data.report
    assert (report.n_read, report.n_kept) == (13, 3)
    assert report.n_kept + report.n_dropped == report.n_read
    assert "read 13, kept 3" in report.summary_line()


def test_task_report_shows_the_target_value_plainly(bad_csv: Path, data_dir: Path) -> None:
    """The non-finite target of a dropped molecule is shown as the user wrote it."""
    source = CSVSource("bad", files=[str(bad_csv)], target_columns=["y"])
    task = Task("bad-y", source, "y", "y", "", False, "", 0.1)
    report = load_task(task, data_dir, progress=False).report
    assert _finding(report, "dropped", "non-finite y").examples[0] == "mol 3: nan"


def test_duplicates_with_different_targets_are_reported_apart() -> None:
    """Repeats of a structure are dropped and the lowest id kept; a repeat whose targets
    differ in any column (NaN against a number too) is a conflict, shown with both values
    and both ids; equal values, NaN and NaN included, are a plain duplicate."""
    nan = float("nan")
    raw = RawData(
        mol_id=np.array([3, 5, 8, 9, 12, 14, 20], dtype=np.int64),
        smiles=["CCO", "OCC", "C(C)O", "c1ccccc1", "C1=CC=CC=C1", "CCN", "NCC"],
        targets={
            "a": np.array([1.0, 1.0, 1.5, 2.0, 2.0, nan, nan]),
            "b": np.array([7.0, 7.0, 7.0, nan, 4.0, 0.5, 0.5]),
        },
        geometry=None,
        report=DataReport("dups", n_read=7),
    )
    table, report = validate(raw, None, progress=False)
    assert table.mol_id.tolist() == [3, 9, 14]
    assert table.targets["a"][0] == 1.0 and np.isnan(table.targets["b"][1])
    plain = _finding(report, "dropped", "duplicate structure")
    assert plain.examples == ["mol 5: same as mol 3", "mol 20: same as mol 14"]
    conflict = _finding(report, "dropped", "duplicate structure with a different target")
    assert conflict.examples == [
        "mol 8: same as mol 3; a 1.0 (mol 3) vs 1.5 (mol 8)",
        "mol 12: same as mol 9; b nan (mol 9) vs 4.0 (mol 12)",
    ]
    assert (report.n_read, report.n_kept, report.n_dropped) == (7, 3, 4)
    line = report.summary_line()
    assert "2 dropped (duplicate structure);" in line
    assert "2 dropped (duplicate structure with a different target)" in line


def test_conflicting_duplicate_names_every_column_that_differs() -> None:
    raw = RawData(
        mol_id=np.array([0, 1], dtype=np.int64),
        smiles=["CCO", "OCC"],
        targets={"density": np.array([1.25, 1.5]), "hof": np.array([-3.0, -2.5])},
        geometry=None,
        report=DataReport("two columns", n_read=2),
    )
    _, report = validate(raw, None, progress=False)
    finding = _finding(report, "dropped", "duplicate structure with a different target")
    assert finding.examples == [
        "mol 1: same as mol 0; density 1.25 (mol 0) vs 1.5 (mol 1); "
        "hof -3.0 (mol 0) vs -2.5 (mol 1)"
    ]


def _raw(smiles: list[str], numbers: list[list[int]]) -> RawData:
    counts = [len(z) for z in numbers]
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    flat = np.array([z for zs in numbers for z in zs], dtype=np.int8)
    coords = np.arange(3 * len(flat), dtype=np.float32).reshape(-1, 3)
    return RawData(
        mol_id=np.array([10, 11, 12], dtype=np.int64),
        smiles=smiles,
        targets={"t": np.array([1.0, 2.0, 3.0])},
        geometry=Geometry(flat, coords, offsets),
        report=DataReport("geo", n_read=len(smiles)),
    )


def test_geometry_that_disagrees_with_the_smiles_is_dropped() -> None:
    """A molecule whose 3D atoms do not have the SMILES's formula (hydrogens included)
    is dropped; the geometry of kept molecules stays aligned with them."""
    water, methane, ammonia = [8, 1, 1], [6, 1, 1, 1, 1], [7, 1, 1, 1]
    raw = _raw(["O", "C", "N"], [water, [6, 1, 1, 1], ammonia])  # CH3 is not methane
    table, report = validate(raw, None, progress=False)
    assert table.mol_id.tolist() == [10, 12]
    finding = _finding(report, "dropped", "geometry formula differs from SMILES")
    assert (finding.count, finding.examples) == (1, ["mol 11: C"])
    assert table.geometry is not None
    assert table.geometry.molecule(0)[0].tolist() == water
    assert table.geometry.molecule(1)[0].tolist() == ammonia
    assert table.geometry.molecule(1)[1].tolist() == raw.geometry.molecule(2)[1].tolist()
    assert (report.n_read, report.n_kept, report.n_dropped) == (3, 2, 1)
    # the same molecules with a consistent geometry are all kept
    table, report = validate(_raw(["O", "C", "N"], [water, methane, ammonia]), None, False)
    assert table.mol_id.tolist() == [10, 11, 12]
    assert report.n_dropped == 0


def test_two_files_are_one_data_set(make_csv) -> None:
    """The csd10k layout: two files with the same molecules in the same order merge by
    row into one table with both target columns."""
    a = make_csv("a.csv", "smiles,a", ["CCO,1", "CCC,2", "c1ccccc1,3"])
    b = make_csv("b.csv", "smiles,b", ["CCO,10", "CCC,", "c1ccccc1,30"])
    source = CSVSource("two", [str(a), str(b)], target_columns=["a", "b"])
    table, report = validate(source.read(a.parent), None, progress=False)
    assert table.mol_id.tolist() == [0, 1, 2]
    assert table.targets["a"].tolist() == [1.0, 2.0, 3.0]
    assert table.targets["b"][[0, 2]].tolist() == [10.0, 30.0]
    assert np.isnan(table.targets["b"][1])
    assert _finding(report, "unreadable", "empty b value").examples == ["mol 1 (line 3)"]


def test_two_files_that_disagree_are_refused(make_csv) -> None:
    """Files whose rows are not the same molecules raise, naming file and line."""
    a = make_csv("a.csv", "smiles,a", ["CCO,1", "CCC,2"])
    b = make_csv("b.csv", "smiles,b", ["CCO,10", "CCN,20"])
    source = CSVSource("two", [str(a), str(b)], target_columns=["a", "b"])
    with pytest.raises(ValueError, match=r"b\.csv line 3: SMILES 'CCN' differs from 'CCC'"):
        source.read(a.parent)


def test_two_file_source_counts_each_dropped_row_once(make_csv) -> None:
    """4 rows, 2 kept: read must be 4, not 6."""
    a = make_csv("a.csv", "smiles,a", ["CCO,1", "", "CCC,3", ",4"])
    b = make_csv("b.csv", "smiles,b", ["CCO,10", "", "CCC,30", ",40"])
    source = CSVSource("two", [str(a), str(b)], target_columns=["a", "b"])
    table, report = validate(source.read(a.parent), None, progress=False)
    assert table.mol_id.tolist() == [0, 2]
    assert (report.n_read, report.n_kept, report.n_dropped) == (4, 2, 2)


def test_user_csv_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    path = tmp_path / "excel.csv"
    path.write_bytes("\ufeffsmiles,y\nCCO,1.0\n".encode())
    raw = CSVSource("excel", [str(path)], target_columns=["y"]).read(tmp_path)
    assert raw.smiles == ["CCO"]


# ------------------------------------------------------------------ unreadable files


def _read(path: Path, target_columns: list[str], smiles_column: str = "smiles") -> None:
    CSVSource("mine", [str(path)], smiles_column, target_columns).read(path.parent)


@pytest.mark.parametrize(
    ("header", "missing"),
    [("smiles,logS", "'y'"), ("SMILES,y", "'smiles'"), ("name,logS", "'smiles', 'y'")],
)
def test_missing_column_is_named_with_the_files_columns(make_csv, header, missing) -> None:
    """A SMILES or target column the file lacks is named, next to the columns it has."""
    path = make_csv("mine.csv", header, ["CCO,1.0"])
    with pytest.raises(DataFileError) as error:
        _read(path, ["y"])
    message = str(error.value)
    assert message.startswith(f"{path}: no column {missing} ")
    assert f"the file's columns are {header.split(',')}" in message


def test_target_column_in_no_file_of_a_two_file_source_is_named(make_csv) -> None:
    """Each file may hold some of the target columns, but each column must be somewhere."""
    a = make_csv("a.csv", "smiles,a", ["CCO,1"])
    b = make_csv("b.csv", "smiles,a2,c", ["CCO,2,3"])
    source = CSVSource("two", [str(a), str(b)], target_columns=["a", "a2", "b"])
    with pytest.raises(DataFileError, match=r"no file has the target column\(s\) \['b'\]") as e:
        source.read(a.parent)
    assert f"{a} has ['smiles', 'a']; {b} has ['smiles', 'a2', 'c']" in str(e.value)


@pytest.mark.parametrize(("delimiter", "name"), [(";", "semicolon"), ("\t", "tab")])
def test_other_delimiter_gets_a_hint(make_csv, delimiter: str, name: str) -> None:
    path = make_csv("mine.csv", f"smiles{delimiter}y", [f"CCO{delimiter}1,5"])
    with pytest.raises(DataFileError) as error:
        _read(path, ["y"])
    message = str(error.value)
    assert message.startswith(str(path))
    assert f"looks {name}-delimited, but it must be comma-separated" in message


def test_file_that_is_not_utf8_names_line_and_byte(tmp_path: Path) -> None:
    """A Latin-1 file fails naming the line and byte of the first non-UTF-8 byte,
    raised without the UnicodeDecodeError attached."""
    path = tmp_path / "latin1.csv"
    path.write_bytes("smiles,y,name\nCCO,1.0,ethanol\nCCN,2.0,café\n".encode("latin-1"))
    with pytest.raises(DataFileError) as error:
        _read(path, ["y"])
    assert str(error.value).startswith(f"{path} line 3: byte 12 (0xe9) is not UTF-8; save")
    assert error.value.__cause__ is None and error.value.__suppress_context__


def test_non_utf8_byte_past_the_read_ahead_is_placed_on_its_line(tmp_path: Path) -> None:
    """Far beyond the text stream's first chunk, the line number is still the file's."""
    rows = [f"{'C' * (k % 7 + 1)},{k}" for k in range(3000)]
    path = tmp_path / "long.csv"
    path.write_bytes(("\n".join(["smiles,y", *rows, "CCO,\xb5"]) + "\n").encode("latin-1"))
    with pytest.raises(DataFileError, match=r"line 3002: byte 5 \(0xb5\) is not UTF-8"):
        _read(path, ["y"])
