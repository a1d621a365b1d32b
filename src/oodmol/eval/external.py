"""Scoring predictions made outside this repository (another code base, an LLM's answers)
on a task's standard ID and OOD sets. Nothing is guessed: molecules that are missing,
unknown, unparseable or duplicated are reported by name."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from oodmol.data.splits.assignment import SplitAssignment
from oodmol.data.task import TaskData
from oodmol.data.validate import parse_smiles
from oodmol.eval.results import SetPredictions

MAX_NAMED = 10


class PredictionFileError(ValueError):
    """The predictions file cannot be scored as it is."""


def read_predictions(path: Path, data: TaskData) -> tuple[pd.DataFrame, dict]:
    """The file's rows with a resolved `mol_id`, and a report of rows that did not resolve.

    Rows are matched by `mol_id` when the file has that column, otherwise by RDKit
    canonical SMILES (so any valid spelling of a molecule matches).
    """
    frame = pd.read_csv(path)
    if "y_pred" not in frame or not ({"mol_id", "smiles"} & set(frame.columns)):
        raise PredictionFileError(
            f"{path}: needs a y_pred column and a mol_id or smiles column; has {list(frame)}"
        )
    report: dict = {"rows": len(frame)}
    if "mol_id" in frame:
        frame["mol_id"] = pd.to_numeric(frame["mol_id"], errors="coerce")
        unreadable = frame["mol_id"].isna()
        report["unreadable_mol_id"] = _named(frame.index[unreadable] + 2, "line")
        unknown = ~unreadable & ~frame["mol_id"].isin(data.table.mol_id)
        report["not_in_task"] = _named(frame["mol_id"][unknown].astype(np.int64), "mol")
        bad = unreadable | unknown
    else:
        by_smiles = {s: i for s, i in zip(data.table.smiles, data.table.mol_id, strict=True)}
        canonical = [parse_smiles(str(s)).canonical for s in frame["smiles"]]
        frame["mol_id"] = [by_smiles.get(c, np.nan) if c else np.nan for c in canonical]
        unparseable = np.array([c is None for c in canonical])
        report["unparseable_smiles"] = _named(frame["smiles"][unparseable], "")
        bad = frame["mol_id"].isna() & ~unparseable
        report["not_in_task"] = _named(frame["smiles"][bad], "")
        bad = frame["mol_id"].isna()
    frame = frame[~bad].copy()
    frame["mol_id"] = frame["mol_id"].astype(np.int64)
    frame["y_pred"] = pd.to_numeric(frame["y_pred"], errors="coerce")
    duplicated = frame["mol_id"].duplicated(keep=False)
    if duplicated.any():
        raise PredictionFileError(
            f"{path}: {duplicated.sum()} rows predict a molecule more than once "
            f"(mol ids {sorted(set(frame['mol_id'][duplicated]))[:MAX_NAMED]})"
        )
    return frame, report


def score_sets(
    frame: pd.DataFrame, data: TaskData, split: SplitAssignment, report: dict
) -> dict[str, SetPredictions]:
    """ID and OOD predictions for the molecules the file covers; the rest are reported."""
    by_id = frame.set_index("mol_id")
    known = set(by_id.index)
    elsewhere = known - set(split.sets["id"]) - set(split.sets["ood"])
    report["not_in_test_sets"] = _named(sorted(elsewhere), "mol")
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
