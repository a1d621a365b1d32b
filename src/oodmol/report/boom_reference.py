"""BOOM's published numbers (Tables 1, 5-9 of the paper) as reference rows beside ours.

The numbers ship with the package in `boom_paper.json` (made by
scripts/boom_paper_json.py from the tables as typed), with the citation and the paper's
known defects; a defective value is null there and stays unknown here. A paper number
stands only beside a run of the same model on the same task's standard OOD split, as the
plain model (no uncertainty method, no [flag]): a subset run or an external partial file
is not the experiment the paper reports, so no ratio is ever computed for it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cache
from importlib.resources import files

import pandas as pd

PAPER_LABEL = "BOOM (paper)"
RATIO_LABEL = "ours / paper"
# our table (metric) -> the paper tables that hold it, and the column of the value
METRIC_SOURCES = {"rmse": (("table7", "rmse"), ("table9", "rmse")), "r2": (("table5", "r2"),)}


@dataclass(frozen=True)
class BoomPaper:
    """The shipped file: citation, defects, and each table as a DataFrame."""

    citation: str
    url: str
    code: str
    runs_per_value: int
    defects: list[dict[str, str]]
    titles: dict[str, str]
    tables: dict[str, pd.DataFrame]


@cache
def boom_paper() -> BoomPaper:
    """Load boom_paper.json from the installed package (never from ../shared)."""
    doc = json.loads(files("oodmol.report").joinpath("boom_paper.json").read_text("utf-8"))
    tables = {
        name: pd.DataFrame(table["rows"], columns=table["columns"])
        for name, table in doc["tables"].items()
    }
    for table in tables.values():
        for column in ("rmse", "r2", "r2_std", "rmse_std", "p"):
            if column in table:
                table[column] = table[column].astype(float)  # null -> NaN
    return BoomPaper(
        citation=doc["citation"],
        url=doc["url"],
        code=doc["code"],
        runs_per_value=doc["runs_per_value"],
        defects=doc["defects"],
        titles={name: table["title"] for name, table in doc["tables"].items()},
        tables=tables,
    )


def published_rmse() -> pd.DataFrame:
    """Every RMSE of Tables 7 and 9: model (the paper's name), task, set, rmse."""
    tables = boom_paper().tables
    rows = [tables[name][["paper_model", "task", "set", "rmse"]] for name in ("table7", "table9")]
    return pd.concat(rows, ignore_index=True).rename(columns={"paper_model": "model"})


def paper_cells() -> pd.DataFrame:
    """One row per model, task, metric and set: columns model, task, metric, set, mean,
    std (NaN where the paper gives none), table (where the number was printed)."""
    paper = boom_paper()
    parts = []
    for metric, sources in METRIC_SOURCES.items():
        for table, column in sources:
            rows = paper.tables[table]
            std = rows.get("rmse_std", math.nan)
            parts.append(
                rows[["model", "task", "set"]].assign(
                    metric=metric, mean=rows[column], std=std, table=table
                )
            )
    cells = pd.concat(parts, ignore_index=True)
    spread = paper.tables["table6"].rename(columns={"r2_std": "r2_std_t6"})
    cells = cells.merge(
        spread[["model", "task", "set", "r2_std_t6"]], on=["model", "task", "set"], how="left"
    )
    is_r2 = cells["metric"] == "r2"
    cells.loc[is_r2, "std"] = cells.loc[is_r2, "r2_std_t6"]
    return cells.drop(columns="r2_std_t6")


def reference_model(label: str, model_name: str) -> str | None:
    """The model whose paper numbers may stand beside a leaderboard column: its own name
    when the column is the plain model, possibly one of its configurations
    ("chemprop @1a2b3c4d"); None for a uq method ("mlp+ensemble") or a flag ("mlp
    [subset]")."""
    return model_name if label.split(" @")[0] == model_name else None


def ratio(ours: float, paper: float) -> float:
    """ours / paper where both are finite and the paper's value is positive (a ratio to
    zero or to a negative R² says nothing); NaN otherwise."""
    if not (math.isfinite(ours) and math.isfinite(paper)) or paper <= 0:
        return math.nan
    return ours / paper


def compare(summary: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """`summary` (tables.summarize) with the paper's number beside each of our cells:
    paper_mean, paper_std, paper_table and ratio (NaN where either is missing or the
    column is not the plain model on the standard "ood" split)."""
    names = runs.drop_duplicates("model").set_index("model")["model_name"]
    ours = summary.assign(
        reference=[
            reference_model(label, names[label]) if split == "ood" else None
            for label, split in zip(summary["model"], summary["split"], strict=True)
        ]
    )
    paper = paper_cells().rename(
        columns={
            "model": "reference",
            "mean": "paper_mean",
            "std": "paper_std",
            "table": "paper_table",
        }
    )
    merged = ours.merge(paper, on=["reference", "task", "metric", "set"], how="left")
    merged["ratio"] = [
        ratio(a, b) for a, b in zip(merged["mean"], merged["paper_mean"], strict=True)
    ]
    return merged


def paper_by_representation() -> pd.DataFrame:
    """BOOM Table 1: columns representation (our group name), set, task, rmse."""
    return boom_paper().tables["table1"][["representation", "set", "task", "rmse"]]


def paper_group_tests() -> pd.DataFrame:
    """BOOM Table 8: columns task, n, test, better, worse, p."""
    return boom_paper().tables["table8"]
