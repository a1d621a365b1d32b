"""Uncertainty tables in the layout of Scalia et al. 2020 (Tables 2 and 3): for each
benchmark, one row per metric and set (ID, OOD), one column per model + uq method, on
the total σ; z-scaled and conformal rows follow the uncalibrated ones."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from oodmol.report.tables import FOOTNOTE, GROUP, SETS, _cell


@dataclass(frozen=True)
class UQRow:
    """One metric row: its label, the run column per set ({set} is id or ood) and how
    the best cell is chosen (None: no best, e.g. dispersion)."""

    label: str
    column: str
    best: Callable[[pd.Series], float] | None


def _lowest(means: pd.Series) -> float:
    return means.min()


def _highest(means: pd.Series) -> float:
    return means.max()


def _nearest(target: float) -> Callable[[pd.Series], float]:
    def best(means: pd.Series) -> float:
        return means.loc[(means - target).abs().idxmin()] if means.notna().any() else math.nan

    return best


def _rows() -> tuple[UQRow, ...]:
    """The rows of the total σ, then those of its z-scaled and conformal recalibrations."""
    metrics = (  # column: the metric's name in each method's part of the run record
        UQRow("NLL", "nll", _lowest),
        UQRow("Spearman ρ(error, σ)", "spearman", _highest),
        UQRow("miscalibration area", "miscalibration_area", _lowest),
        UQRow("MCE", "mce", _lowest),
        UQRow("ENCE", "ence", _lowest),
        UQRow("coverage 68 %", "coverage_68", _nearest(0.68)),
        UQRow("coverage 95 %", "coverage_95", _nearest(0.95)),
        UQRow("AUCO", "auco", _lowest),
        UQRow("error drop", "error_drop", _highest),
        UQRow("decrease ratio", "decrease_ratio", _highest),
        UQRow("Cv", "cv", None),
    )
    total = [replace(row, column="uq.{set}.total." + row.column) for row in metrics]
    z_scaled = _recalibrated(
        metrics,
        "z-scaled",
        "uq_recalibrated.zscaling.{set}.",
        ("nll", "miscalibration_area", "ence", "coverage_95"),
    )
    conformal = _recalibrated(
        metrics,
        "conformal",
        "uq_recalibrated.conformal.{set}.",
        ("miscalibration_area", "coverage_95"),
    )
    return (*total, *z_scaled, *conformal)


def _recalibrated(
    metrics: tuple[UQRow, ...], label: str, column: str, names: tuple[str, ...]
) -> list[UQRow]:
    """The rows of the metrics `names` after a recalibration: each as `metrics` has it,
    its label after the recalibration's `label`, its run column after `column`."""
    return [
        replace(row, label=f"{label} {row.label}", column=column + row.column)
        for row in metrics
        if row.column in names
    ]


UQ_ROWS = _rows()
UQ_FOOTNOTE = (
    "Total σ of each method. Coverage: bold is nearest the nominal level. AUCO is in the "
    "property's units. z-scaled and conformal: recalibrated on the validation set. " + FOOTNOTE
)


def summarize_uq(runs: pd.DataFrame) -> pd.DataFrame:
    """Long table (as `tables.summarize`) of every UQ row the runs have, over seeds."""
    parts = []
    for row in UQ_ROWS:
        for set_name in SETS:
            column = row.column.format(set=set_name.lower())
            if column not in runs:
                continue
            values = runs[GROUP].assign(value=pd.to_numeric(runs[column], errors="coerce"))
            stats = values.groupby(GROUP)["value"].agg(["mean", "std", "count"]).reset_index()
            stats = stats[stats["count"] > 0].rename(columns={"count": "n_seeds"})
            stats.insert(len(GROUP), "metric", row.label)
            stats.insert(len(GROUP) + 1, "set", set_name)
            stats.insert(len(GROUP) + 2, "source", column)
            parts.append(stats)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def uq_markdown(summary: pd.DataFrame) -> str:
    """One table per benchmark: rows metric × set, columns model + uq method."""
    lines = ["# Uncertainty (Scalia et al. 2020 layout)", ""]
    for benchmark in sorted(summary["benchmark"].unique()):
        rows = summary[summary["benchmark"] == benchmark]
        models = sorted(rows["model"].unique())
        lines += [
            f"## {benchmark}",
            "",
            "| Metric | Set | " + " | ".join(models) + " |",
            "| --- | --- |" + " ---: |" * len(models),
        ]
        for row in UQ_ROWS:
            for set_name in SETS:
                cells = rows[(rows["metric"] == row.label) & (rows["set"] == set_name)]
                if cells.empty:
                    continue
                cells = cells.set_index("model").reindex(models)
                best = row.best(cells["mean"]) if row.best else math.nan
                text = [
                    _cell(
                        c.mean,
                        c.std,
                        0 if math.isnan(c.n_seeds) else int(c.n_seeds),
                        c.mean == best,
                    )
                    for c in cells.itertuples()
                ]
                lines.append(f"| {row.label} | {set_name} | " + " | ".join(text) + " |")
        lines.append("")
    lines += [UQ_FOOTNOTE, ""]
    return "\n".join(lines)


def write_uq_tables(runs: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Write uq.csv (long form) and uq.md when any run has uncertainty metrics."""
    summary = summarize_uq(runs)
    if summary.empty:
        return []
    csv_path, md_path = out_dir / "uq.csv", out_dir / "uq.md"
    summary.sort_values(["benchmark", "metric", "set", "model"]).to_csv(csv_path, index=False)
    md_path.write_text(uq_markdown(summary))
    return [csv_path, md_path]
