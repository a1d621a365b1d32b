"""Aggregate runs over seeds into BOOM-style leaderboard tables (paper Tables 5–7).

Layout: one table per metric, models as columns, and for every task an ID row and an
OOD row. The R² table uses plain R² for the ID row and binned R² for the OOD row, as
BOOM does, because plain R² on the two-tailed OOD set mostly measures whether a model
separates the tails; and BOOM's R², the squared Pearson correlation (the coefficient of
determination, which also counts a model's bias, stays in runs.csv as `id.r2`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from oodmol.comparability import MEANINGS, ordered

SETS = ("ID", "OOD")
FLAGS_IN_LABEL = re.compile(r" \[([^\]]+)\]")


@dataclass(frozen=True)
class MetricTable:
    """Which run column feeds each row of one table, and which direction is better."""

    name: str
    title: str
    columns: dict[str, str]  # row label → run column
    higher_is_better: bool | None  # None: nearest zero is best (a signed offset)


TABLES = (
    MetricTable("rmse", "RMSE (lower is better)", {"ID": "id.rmse", "OOD": "ood.rmse"}, False),
    MetricTable(
        "r2",
        "R² as BOOM computes it: the squared Pearson correlation (higher is better; ID: R², "
        "OOD: binned R² = mean of the low/high-tail R²)",
        {"ID": "id.pearson_r2", "OOD": "ood.binned_pearson_r2"},
        True,
    ),
    MetricTable(
        "extrapolation",
        "OOD/ID RMSE ratio (lower is better)",
        {"OOD/ID": "extrapolation.ood_id_rmse_ratio"},
        False,
    ),
    MetricTable(
        "stretched",
        "RMSE of the predictions stretched by the validation line (ŷ regressed on y over the "
        "validation molecules and solved for y, undoing the shrinkage to the mean; lower is "
        "better)",
        {"ID": "stretched.id.rmse", "OOD": "stretched.ood.rmse"},
        False,
    ),
    MetricTable(
        "tail_offset",
        "Tail offset: mean signed error ŷ − y of the OOD molecules beyond the training range "
        "(nearest zero is best; a model that regresses to the mean is positive low, negative "
        "high)",
        {"low": "extrapolation.tail_offset.low", "high": "extrapolation.tail_offset.high"},
        None,
    ),
    MetricTable(
        "discovery",
        "Discovery (MatEx): of the k test molecules predicted most extreme, the share in the "
        "OOD tail, k its size (higher is better)",
        {
            "high tail": "extrapolation.discovery.high.precision",
            "low tail": "extrapolation.discovery.low.precision",
        },
        True,
    ),
)
GROUP = ["benchmark", "task", "split", "split_hash", "model"]

FOOTNOTE = (
    "Cells: mean ± sample standard deviation (ddof=1) over seeds; (n=k) counts the seeds "
    "with a finite value. With n=1 only the mean is shown (no spread can be estimated). "
    "Bold: best mean in the row among runs without a [flag]. –: no run or no finite value."
)


def label_benchmarks(runs: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Add a ``benchmark`` row label per (task, split, split_hash); return warnings.

    The label is the task name, with the split appended when it is not the standard
    "ood" split. Runs of one task/split made on different splits (different
    ``split_hash``) are not comparable, so they are never averaged together: each hash
    becomes its own row, labelled with the hash prefix, and a warning is returned.
    """
    runs = runs.copy()
    warnings: list[str] = []
    labels = runs["task"].where(runs["split"] == "ood", runs["task"] + " (" + runs["split"] + ")")
    for (task, split), group in runs.groupby(["task", "split"]):
        hashes = sorted(group["split_hash"].unique())
        if len(hashes) > 1:
            warnings.append(
                f"{task}/{split}: runs use {len(hashes)} different split_hash values "
                f"({', '.join(h[:8] for h in hashes)}); reported as separate rows"
            )
            suffix = " [" + group["split_hash"].str[:8] + "]"
            labels.loc[group.index] = labels.loc[group.index] + suffix
    runs["benchmark"] = labels
    return runs, warnings


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """Long table of mean, sample std and seed count per benchmark × model × table row.

    Columns: benchmark, task, split, split_hash, model, metric, set, source (the run
    column used), mean, std, n_seeds. NaN values (undefined metrics) are left out of
    the mean and of n_seeds; std is NaN when fewer than two seeds remain.
    """
    parts = []
    runs = runs.copy()
    for table in TABLES:
        for set_name, column in table.columns.items():
            if column not in runs:  # runs recorded before the measure existed
                runs[column] = float("nan")
            stats = runs.groupby(GROUP)[column].agg(["mean", "std", "count"]).reset_index()
            stats = stats.rename(columns={"count": "n_seeds"})
            stats.insert(len(GROUP), "metric", table.name)
            stats.insert(len(GROUP) + 1, "set", set_name)
            stats.insert(len(GROUP) + 2, "source", column)
            parts.append(stats)
    return pd.concat(parts, ignore_index=True)


def _cell(mean: float, std: float, n: int, best: bool) -> str:
    """Format one ``mean ± std (n=k)`` cell (4 significant digits)."""
    if n == 0 or math.isnan(mean):
        return "–"
    text = f"{mean:.4g}" if n == 1 else f"{mean:.4g} ± {std:.4g}"
    text = f"**{text}**" if best else text
    return f"{text} (n={n})"


def markdown_table(summary: pd.DataFrame, table: MetricTable) -> str:
    """Render one metric as the paper-style grid: rows task × {ID, OOD}, columns models."""
    rows = summary[summary["metric"] == table.name]
    models = sorted(rows["model"].unique())
    lines = [
        f"## {table.title}",
        "",
        "| Task | Set | " + " | ".join(models) + " |",
        "| --- | --- |" + " ---: |" * len(models),
    ]
    for benchmark in sorted(rows["benchmark"].unique()):
        for set_name in table.columns:
            row = rows[(rows["benchmark"] == benchmark) & (rows["set"] == set_name)]
            row = row.set_index("model").reindex(models)
            means = row["mean"][[m for m in models if not _flagged(m)]]
            if table.higher_is_better is None:
                best = means.loc[means.abs().idxmin()] if means.notna().any() else math.nan
            else:
                best = means.max() if table.higher_is_better else means.min()
            cells = [
                _cell(r.mean, r.std, 0 if math.isnan(r.n_seeds) else int(r.n_seeds), r.mean == best)
                for r in row.itertuples()
            ]
            lines.append(f"| {benchmark} | {set_name} | " + " | ".join(cells) + " |")
    lines += ["", FOOTNOTE, *_flag_legend(models), ""]
    return "\n".join(lines)


def flags(label: str) -> list[str]:
    """The flags in a leaderboard label ("mlp [subset, shortened] @1a2b3c4d")."""
    found = FLAGS_IN_LABEL.search(label)
    return found.group(1).split(", ") if found else []


def _flagged(label: str) -> bool:
    return bool(flags(label))


def _flag_legend(models: list[str]) -> list[str]:
    """One line per flag that a column of this table carries."""
    used = {flag for model in models for flag in flags(model)}
    return [f"[{flag}]: {MEANINGS[flag]}." for flag in ordered(used) if flag in MEANINGS]


def write_tables(summary: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Write ``<metric>.csv`` (tidy long form) and ``<metric>.md`` for every table."""
    written = []
    for table in TABLES:
        rows = summary[summary["metric"] == table.name]
        rows = rows.sort_values(["benchmark", "set", "model"])
        csv_path, md_path = out_dir / f"{table.name}.csv", out_dir / f"{table.name}.md"
        rows.to_csv(csv_path, index=False)
        md_path.write_text(markdown_table(summary, table))
        written += [csv_path, md_path]
    return written
