"""Scoring predictions made outside this repository (another code base, an LLM's answers)
on a task's standard ID and OOD sets. Nothing is guessed: molecules that are missing,
unknown, unparseable or duplicated are reported by name, and a value that is not a finite
number stops the scoring, naming its line."""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
from hydra.utils import instantiate
from omegaconf import DictConfig

from oodmol.bounded import check_size
from oodmol.comparability import coverage_flags
from oodmol.data.sources.csv_source import check_utf8, delimiter_hint
from oodmol.data.splits.assignment import SplitAssignment
from oodmol.data.task import TaskData, load_split, load_task
from oodmol.data.validate import parse_smiles
from oodmol.errors import UserError
from oodmol.overrides import OverrideError
from oodmol.predictions import MAX_PREDICTIONS_BYTES, SetPredictions
from oodmol.run_record import RunRecord
from oodmol.scoring.results import write_results
from oodmol.scoring.values import value_problems

log = logging.getLogger("oodmol.evaluate")
MAX_NAMED = 10
VALUE_COLUMNS = ("y_pred", "y_std")  # the numbers a row gives for its molecule


class PredictionFileError(UserError, ValueError):
    """The predictions file cannot be scored as it is."""


def read_predictions(path: Path, data: TaskData) -> tuple[pd.DataFrame, dict]:
    """The file's rows with a resolved `mol_id`, and a report of rows that did not resolve.

    Rows are matched by `mol_id` when the file has that column, otherwise by RDKit
    canonical SMILES (so any valid spelling of a molecule matches). The frame's index is
    each row's line in the file; `y_pred` and `y_std` are still the text written there
    (`check_values` reads them).
    """
    frame = _read_rows(path)
    if "y_pred" not in frame or not ({"mol_id", "smiles"} & set(frame.columns)):
        raise PredictionFileError(
            f"{path}: needs a y_pred column and a mol_id or smiles column; has {list(frame)}"
            f"{delimiter_hint(list(frame.columns))}"
        )
    if frame.empty:
        raise PredictionFileError(
            f"{path} has a header ({', '.join(frame.columns)}) but no rows: no predictions to score"
        )
    report: dict = {"rows": len(frame)}
    if "mol_id" in frame:
        frame["mol_id"] = _mol_ids(frame["mol_id"])
        unreadable = frame["mol_id"].isna()
        report["unreadable_mol_id"] = _named(frame.index[unreadable], "line")
        unknown = ~unreadable & ~frame["mol_id"].isin(data.table.mol_id)
        report["not_in_task"] = _named(frame["mol_id"][unknown].astype(np.int64), "mol")
        bad = unreadable | unknown
        if "smiles" in frame:
            _check_smiles_agree(frame[~bad], data, path)
    else:
        by_smiles = {s: i for s, i in zip(data.table.smiles, data.table.mol_id, strict=True)}
        canonical = [parse_smiles(s).canonical if s.strip() else None for s in frame["smiles"]]
        frame["mol_id"] = [by_smiles.get(c, np.nan) if c else np.nan for c in canonical]
        unparseable = np.array([c is None for c in canonical])
        report["unparseable_smiles"] = _named(frame["smiles"][unparseable], "")
        bad = frame["mol_id"].isna() & ~unparseable
        report["not_in_task"] = _named(frame["smiles"][bad], "")
        bad = frame["mol_id"].isna()
    frame = frame[~bad].copy()
    frame["mol_id"] = frame["mol_id"].astype(np.int64)
    duplicated = frame["mol_id"].duplicated(keep=False)
    if duplicated.any():
        raise PredictionFileError(
            f"{path}: {duplicated.sum()} rows predict a molecule more than once "
            f"(mol ids {sorted(set(frame['mol_id'][duplicated]))[:MAX_NAMED]})"
        )
    return frame, report


def _mol_ids(cells: pd.Series) -> pd.Series:
    """The mol_id column as numbers where a cell is a whole number written as such; any
    other cell (`abc`, and `12.7` or `1e2`, which are no molecule's id) is unreadable
    (NaN), reported by line rather than rounded to another molecule."""
    written = cells.str.strip()
    whole = written.str.fullmatch(r"\d+")
    return pd.to_numeric(written.where(whole), errors="coerce")


def _check_smiles_agree(frame: pd.DataFrame, data: TaskData, path: Path) -> None:
    """A file with both columns must name each molecule twice the same way: a row whose
    SMILES is another molecule than its mol_id is refused, not trusted either way."""
    known = data.table.smiles[data.table.rows_of(frame["mol_id"].to_numpy(np.int64))]
    disagree = []
    for (line, text), expected in zip(frame["smiles"].items(), known, strict=True):
        if text.strip() and parse_smiles(text).canonical != expected:
            mol_id = int(frame.at[line, "mol_id"])
            disagree.append(f"line {line}: mol_id {mol_id} is {expected}, not {text.strip()}")
    if disagree:
        shown = "; ".join(disagree[:MAX_NAMED])
        raise PredictionFileError(
            f"{path}: {len(disagree)} rows give a SMILES that is not their mol_id's molecule "
            f"({shown}); correct the file or drop one of the two columns"
        )


def _read_rows(path: Path) -> pd.DataFrame:
    """Every cell as the text written, so that an empty cell, `nan` and `abc` stay apart;
    indexed by line number (blank lines are counted, then dropped)."""
    check_size(path, MAX_PREDICTIONS_BYTES, "predictions file")
    check_utf8(path)
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, skip_blank_lines=False)
    except pd.errors.EmptyDataError:
        raise PredictionFileError(
            f"{path} is empty: it needs a header (smiles,y_pred or mol_id,y_pred) and a row "
            "per molecule"
        ) from None
    frame.index = pd.RangeIndex(2, len(frame) + 2, name="line")
    return frame[(frame != "").any(axis=1)].copy()


def check_values(
    frame: pd.DataFrame, data: TaskData, split: SplitAssignment, path: Path
) -> pd.DataFrame:
    """The frame with `y_pred` (and `y_std`) as numbers, after checking every row that
    predicts an ID or OOD molecule: an empty, non-numeric or non-finite value (or a
    negative σ) raises one error naming each such row by line and molecule."""
    columns = [c for c in VALUE_COLUMNS if c in frame]
    roles = pd.Series(split.role_of(frame["mol_id"].to_numpy()), index=frame.index)
    scored = frame[roles.isin(["id", "ood"])]
    problems = pd.DataFrame(
        {c: [_problem(c, text) for text in scored[c]] for c in columns}, index=scored.index
    )
    bad = problems.notna().any(axis=1)
    if bad.any():
        raise PredictionFileError(
            _bad_rows(path, scored[bad], problems[bad], roles, data, len(scored))
        )
    frame = frame.copy()
    for column in columns:
        frame[column] = frame[column].map(_number).astype(float)
    return frame


def _problem(column: str, text: str) -> str | None:
    """What is wrong with one value cell: empty, not a number, not finite, out of range,
    negative."""
    value = _number(text)
    if not text.strip():
        return "empty"
    if value is None:
        return "not a number"
    return value_problems(np.array([value]), column)[0] or None


def _bad_rows(
    path: Path,
    rows: pd.DataFrame,
    problems: pd.DataFrame,
    roles: pd.Series,
    data: TaskData,
    n_scored: int,
) -> str:
    """Every bad row at once, one line each (line, molecule, set, what is wrong), under
    a count of each kind of problem: one round of corrections fixes the file."""
    smiles_of = dict(zip(data.table.mol_id.tolist(), data.table.smiles.tolist(), strict=True))
    counts: Counter[str] = Counter()
    lines = []
    for line, row in rows.iterrows():
        found = problems.loc[line].dropna()
        counts.update(f"{column} {kind}" for column, kind in found.items())
        cells = "; ".join(_described(column, row[column], kind) for column, kind in found.items())
        mol_id = int(row["mol_id"])
        lines.append(f"line {line}: mol {mol_id} ({smiles_of[mol_id]}), {roles[line]} set: {cells}")
    summary = ", ".join(f"{n} {what}" for what, n in sorted(counts.items()))
    return (
        f"{path}: {len(rows)} of the {n_scored} ID and OOD rows cannot be scored ({summary}); "
        "correct them and score again:\n  " + "\n  ".join(lines)
    )


def _described(column: str, text: str, kind: str) -> str:
    return f"{column} is empty" if kind == "empty" else f"{column} {text!r} is {kind}"


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def score_sets(
    frame: pd.DataFrame, data: TaskData, split: SplitAssignment, report: dict
) -> dict[str, SetPredictions]:
    """ID and OOD predictions for the molecules the file covers; the rest are reported."""
    by_id = frame.set_index("mol_id")
    known = set(by_id.index)
    elsewhere = known - set(split.sets["id"]) - set(split.sets["ood"])
    report["not_in_test_sets"] = _named(sorted(elsewhere), "mol")
    if not known & (set(split.sets["id"]) | set(split.sets["ood"])):
        raise PredictionFileError(
            "no row predicts a molecule of the ID or OOD test set: nothing to score (the "
            "test molecules are in `oodmol data export`'s file, set id and ood)"
        )
    sets = {}
    for name in ("id", "ood"):
        ids = split.sets[name]
        present = np.isin(ids, list(known))
        report[f"missing_{name}"] = _named(ids[~present], "mol")
        ids = ids[present]
        rows = data.table.rows_of(ids)
        std = by_id.loc[ids, "y_std"].to_numpy(float) if "y_std" in by_id else None
        sets[name] = SetPredictions(
            name,
            ids,
            data.table.smiles[rows],
            data.y[rows],
            by_id.loc[ids, "y_pred"].to_numpy(float),
            std,
        )
    return sets


def _named(values, prefix: str) -> dict:
    values = list(values)
    shown = [f"{prefix} {v}".strip() for v in values[:MAX_NAMED]]
    return {"count": len(values), "examples": shown}


def score_file(cfg: DictConfig, out_dir: Path) -> dict:
    """Score an external predictions CSV (`smiles,y_pred` or `mol_id,y_pred`)."""
    if cfg.get("task") is None or cfg.get("split") is None:
        raise OverrideError("scoring a predictions file needs task=<task> and split=<split>")
    task = instantiate(cfg.task)
    data_dir = Path(cfg.paths.data_dir)
    data = load_task(task, data_dir, cfg.progress)
    split = load_split(data, instantiate(cfg.split), data_dir)
    frame, report = read_predictions(Path(cfg.predictions), data)
    frame = check_values(frame, data, split, Path(cfg.predictions))
    sets = score_sets(frame, data, split, report)
    for name, finding in report.items():
        if isinstance(finding, dict) and finding["count"]:
            log.warning("%s: %d (%s)", name, finding["count"], ", ".join(finding["examples"]))
    header = {
        "task": task.name,
        "split": cfg.split.name,
        "model": cfg.model_name,
        "seed": cfg.seed,
        "status": "complete",
        "split_hash": split.hash,
        "n_params": None,
        "train_seconds": None,
        "predictions_file": str(cfg.predictions),
        "coverage": report,
        "flags": coverage_flags(report),
    }
    train_y = data.y[data.table.rows_of(split.sets["train"])]
    record, _ = write_results(
        out_dir,
        sets,
        RunRecord.of(header),
        float(np.median(train_y)),
        task.property,
        task.units,
        train_range=(float(train_y.min()), float(train_y.max())),
    )
    return record.to_json()
