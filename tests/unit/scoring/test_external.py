"""External predictions files (`evaluate.py predictions=<csv>`): a file that cannot be
scored is refused before any metric is written, naming every bad row by line and
molecule, whichever set (ID or OOD) it is in."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from oodmol.data.splits.assignment import SplitAssignment
from oodmol.data.splits.splitters import RandomSplitter
from oodmol.data.task import TaskData, csv_task, load_task
from oodmol.scoring.external import PredictionFileError, check_values, read_predictions, score_sets


@pytest.fixture
def task(make_csv, data_dir: Path) -> tuple[TaskData, SplitAssignment]:
    """20 molecules: OOD 4, ID round(0.25 * 16) = 4, val round(0.25 * 12) = 3, train 9."""
    rows = [f"{'C' * k},{k * 0.5}" for k in range(1, 11)]
    rows += [f"{'C' * k}O,{k * 0.7 - 3}" for k in range(1, 11)]
    data = load_task(csv_task(str(make_csv("chains.csv", "smiles,y", rows)), "y"), data_dir)
    split = RandomSplitter(ood_size=4, id_fraction=0.25, val_fraction=0.25).split(data.table, "y")
    assert split.sizes() == {"train": 9, "val": 3, "id": 4, "ood": 4}
    return data, split


def _write(path: Path, header: str, rows: list[str]) -> Path:
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def _check(path: Path, data: TaskData, split: SplitAssignment):
    frame, report = read_predictions(path, data)
    return check_values(frame, data, split, path), report


def _smiles(data: TaskData, mol_id: int) -> str:
    return str(data.table.smiles[data.table.rows_of(np.array([mol_id]))][0])


@pytest.mark.parametrize("rows", [[], ["", ""]], ids=["header-only", "blank-lines"])
def test_file_without_rows_says_so(task, tmp_path: Path, rows: list[str]) -> None:
    path = _write(tmp_path / "p.csv", "mol_id,y_pred", rows)
    with pytest.raises(PredictionFileError, match=r"has a header \(mol_id, y_pred\) but no rows"):
        read_predictions(path, task[0])


def test_empty_file_says_what_it_needs(task, tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_text("")
    with pytest.raises(PredictionFileError, match=r"p\.csv is empty: it needs a header"):
        read_predictions(path, task[0])


def test_every_bad_value_in_both_sets_is_named_at_once(task, tmp_path: Path) -> None:
    """Empty, non-numeric and non-finite y_pred and a negative or empty y_std, in ID and
    OOD rows, each named with its line (blank lines counted) and molecule; bad values of
    a training molecule are not scored, so not named."""
    data, split = task
    id_ids, ood_ids = split.sets["id"].tolist(), split.sets["ood"].tolist()
    train_id = int(split.sets["train"][0])
    values = {i: ("1.5", "0.2") for i in id_ids + ood_ids}
    values[id_ids[0]] = ("abc", "0.2")  # line 2
    values[id_ids[2]] = ("", "-0.1")  # line 4
    values[ood_ids[0]] = ("nan", "0.2")  # line 7 (after the blank line 6)
    values[ood_ids[1]] = ("-inf", "")  # line 8
    values[ood_ids[3]] = ("2.0", "inf")  # line 10
    rows = [f"{i},{p},{s}" for i, (p, s) in values.items()]
    rows[4:4] = [""]
    rows.append(f"{train_id},abc,")
    path = _write(tmp_path / "p.csv", "mol_id,y_pred,y_std", rows)
    with pytest.raises(PredictionFileError) as error:
        _check(path, data, split)

    def row(line: int, mol_id: int, name: str, problems: str) -> str:
        return f"line {line}: mol {mol_id} ({_smiles(data, mol_id)}), {name} set: {problems}"

    assert str(error.value).split("\n") == [
        f"{path}: 5 of the 8 ID and OOD rows cannot be scored (1 y_pred empty, "
        "1 y_pred not a number, 2 y_pred not finite, 1 y_std empty, 1 y_std negative, "
        "1 y_std not finite); correct them and score again:",
        "  " + row(2, id_ids[0], "id", "y_pred 'abc' is not a number"),
        "  " + row(4, id_ids[2], "id", "y_pred is empty; y_std '-0.1' is negative"),
        "  " + row(7, ood_ids[0], "ood", "y_pred 'nan' is not finite"),
        "  " + row(8, ood_ids[1], "ood", "y_pred '-inf' is not finite; y_std is empty"),
        "  " + row(10, ood_ids[3], "ood", "y_std 'inf' is not finite"),
    ]


def test_more_than_ten_bad_rows_are_all_named(task, tmp_path: Path) -> None:
    """20 rows whose values are all text: 8 scored rows, each on its own line."""
    data, split = task
    rows = [f"{i},x" for i in data.table.mol_id.tolist()]
    path = _write(tmp_path / "p.csv", "mol_id,y_pred", rows)
    with pytest.raises(PredictionFileError) as error:
        _check(path, data, split)
    lines = str(error.value).split("\n")
    assert "8 of the 8 ID and OOD rows cannot be scored (8 y_pred not a number)" in lines[0]
    named = sorted(int(line.split("mol ")[1].split(" ")[0]) for line in lines[1:])
    assert named == sorted(split.sets["id"].tolist() + split.sets["ood"].tolist())


def test_good_file_reads_as_numbers(task, tmp_path: Path) -> None:
    """Written by SMILES with a blank line and a y_std column: scored as numbers."""
    data, split = task
    ids = split.sets["id"].tolist() + split.sets["ood"].tolist()
    rows = [f"{_smiles(data, i)},{i / 4},{i / 8}" for i in ids]
    path = _write(tmp_path / "p.csv", "smiles,y_pred,y_std", ["", *rows])
    frame, report = _check(path, data, split)
    assert frame.index.tolist() == list(range(3, 3 + len(ids)))
    sets = score_sets(frame, data, split, report)
    for name in ("id", "ood"):
        assert sets[name].y_pred.tolist() == [i / 4 for i in split.sets[name].tolist()]
        assert sets[name].y_std.tolist() == [i / 8 for i in split.sets[name].tolist()]
