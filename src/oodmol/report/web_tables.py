"""The report's tables as `html.Table`s: BOOM's Table 7 / 5 layouts with the paper's
rows and our/paper ratios, Table 1 by representation, per-task and per-model tables, and
the provenance of every cell (runs, seeds, split hash, flags)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd

from oodmol.report.boom_reference import (
    PAPER_LABEL,
    RATIO_LABEL,
    paper_by_representation,
    paper_cells,
)
from oodmol.report.html import Cell, Table, link
from oodmol.report.representation import ORDER, UNKNOWN, representation
from oodmol.report.tables import GROUP, flags

METRICS = {  # (metric, set) -> column title, higher is better
    ("rmse", "ID"): ("ID RMSE", False),
    ("rmse", "OOD"): ("OOD RMSE", False),
    ("r2", "ID"): ("ID R²", True),
    ("r2", "OOD"): ("OOD binned R²", True),
}
CELLS = (
    "Cells: mean ± sd over seeds (n = seeds with a value); hover a cell for its runs, "
    "seeds, split hash and flags. BOOM (paper): mean ± sd of 3 runs as printed; ours / "
    "paper where both exist and the paper's value is positive; never for a [flag]ged column."
)
BEST_WORST = "Bold: best, underlined: worst among the columns without a [flag]. " + CELLS


def provenance(runs: pd.DataFrame) -> pd.DataFrame:
    """Per benchmark and leaderboard label: runs, seeds, split hash, flags, folders."""
    rows = []
    for (benchmark, model), part in runs.groupby(["benchmark", "model"], sort=True):
        seeds = sorted(int(s) for s in part["seed"].dropna())
        rows.append(
            {
                "benchmark": benchmark,
                "model": model,
                "model_name": part["model_name"].iloc[0],
                "runs": len(part),
                "seeds": ", ".join(map(str, seeds)) or "none",
                "split_hash": ", ".join(sorted(part["split_hash"].unique())),
                "flags": ", ".join(flags(model)) or "none",
                "paths": list(part["path"]),
            }
        )
    return pd.DataFrame(rows).set_index(["benchmark", "model"])


def tooltip(trace: pd.DataFrame, benchmark: str, model: str) -> str:
    if (benchmark, model) not in trace.index:
        return ""
    row = trace.loc[(benchmark, model)]
    return (
        f"{row['runs']} run(s); seeds {row['seeds']}; split {row['split_hash'][:12]}; "
        f"flags: {row['flags']}"
    )


def number(value: float, digits: int = 4) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value:.{digits}g}"


def mean_sd(mean: float, std: float, n: float | None = None) -> str:
    if mean is None or not math.isfinite(mean):
        return "–"
    text = (
        number(mean)
        if std is None or not math.isfinite(std)
        else f"{number(mean)} ± {number(std, 2)}"
    )
    return text if n is None or not math.isfinite(n) else f"{text} (n={int(n)})"


def _extremes(cells: pd.DataFrame, higher_is_better: bool) -> tuple[float, float]:
    """Best and worst mean among unflagged labels (NaN where none)."""
    full = cells.loc[[not flags(m) for m in cells["model"]], "mean"].dropna()
    if full.empty:
        return math.nan, math.nan
    best, worst = (full.max(), full.min()) if higher_is_better else (full.min(), full.max())
    return best, (worst if len(full) > 1 else math.nan)


def _marks(mean: float, best: float, worst: float) -> tuple[str, ...]:
    return tuple(name for name, value in (("best", best), ("worst", worst)) if mean == value)


def model_order(models: list[str], names: dict[str, str]) -> list[str]:
    """Models by representation group (BOOM's row order), then by label."""
    rank = {group: i for i, group in enumerate((*ORDER, UNKNOWN))}
    return sorted(models, key=lambda m: (rank[representation(names[m])], m))


def layout_table(
    comparison: pd.DataFrame,
    trace: pd.DataFrame,
    metric: str,
    set_name: str,
    model_href: Callable[[str], str],
    task_href: Callable[[str], str],
) -> Table:
    """BOOM Table 7 (RMSE) / Table 5 (R²) for one set: models × tasks, each model with
    paper numbers followed by its paper row and its ratio row."""
    cells = comparison[(comparison["metric"] == metric) & (comparison["set"] == set_name)]
    higher = METRICS[(metric, set_name)][1]
    benchmarks = sorted(cells["benchmark"].unique())
    names = dict(zip(cells["model"], cells["model_name"], strict=True))
    table = Table(["model", "representation", *[link(task_href(b), b) for b in benchmarks]])
    extremes = {b: _extremes(cells[cells["benchmark"] == b], higher) for b in benchmarks}
    for model in model_order(sorted(cells["model"].unique()), names):
        mine = cells[cells["model"] == model].set_index("benchmark").reindex(benchmarks)
        row: list[Cell | str] = [link(model_href(model), model), representation(names[model])]
        for b, cell in mine.iterrows():
            best, worst = extremes[b]
            row.append(
                Cell(
                    mean_sd(cell["mean"], cell["std"], cell["n_seeds"]),
                    tooltip(trace, b, model),
                    () if flags(model) else _marks(cell["mean"], best, worst),
                )
            )
        table.add(row)
        if mine["paper_mean"].notna().any():
            paper = [
                Cell(mean_sd(c["paper_mean"], c["paper_std"]), str(c["paper_table"]))
                for _, c in mine.iterrows()
            ]
            table.add([f"{model} · {PAPER_LABEL}", "", *paper], "paper")
            table.add(
                [f"{model} · {RATIO_LABEL}", "", *[Cell(number(r, 3)) for r in mine["ratio"]]],
                "ratio",
            )
    return table


def entity_table(
    comparison: pd.DataFrame, trace: pd.DataFrame, by: str, href: Callable[[str], str]
) -> Table:
    """One task's models (by="model", best and worst marked: they compare on one task)
    or one model's tasks (by="benchmark"), with every metric's ours, paper and ratio
    columns side by side."""
    header: list[Cell | str] = [by]
    for title, _ in METRICS.values():
        header += [title, f"{title} · {PAPER_LABEL}", RATIO_LABEL]
    table = Table(header)
    extremes = {
        (metric, set_name): _extremes(
            comparison[(comparison["metric"] == metric) & (comparison["set"] == set_name)],
            higher,
        )
        if by == "model"
        else (math.nan, math.nan)
        for (metric, set_name), (_, higher) in METRICS.items()
    }
    for key in sorted(comparison[by].unique()):
        part = comparison[comparison[by] == key].set_index(["metric", "set"])
        model, benchmark = (
            (key, part["benchmark"].iloc[0]) if by == "model" else (part["model"].iloc[0], key)
        )
        row: list[Cell | str] = [link(href(key), key)]
        for metric_set in METRICS:
            if metric_set not in part.index:
                row += [Cell("–"), Cell("–"), Cell("–")]
                continue
            c = part.loc[metric_set]
            marks = () if flags(model) else _marks(c["mean"], *extremes[metric_set])
            row += [
                Cell(
                    mean_sd(c["mean"], c["std"], c["n_seeds"]),
                    tooltip(trace, benchmark, model),
                    marks,
                ),
                Cell(mean_sd(c["paper_mean"], c["paper_std"])),
                Cell(number(c["ratio"], 3)),
            ]
        table.add(row)
    return table


def paper_models_table(comparison: pd.DataFrame) -> Table | None:
    """BOOM's published RMSE (Tables 7 and 9) of the models of the paper that have no run
    here, on this folder's tasks: the rows our runs stand beside (BenchML's regressors,
    a model of one's own); None where the paper has none."""
    tasks = sorted(comparison["task"].unique())
    names = set(comparison["model_name"]) if "model_name" in comparison else set()
    cells = paper_cells()
    cells = cells[
        (cells["metric"] == "rmse") & cells["task"].isin(tasks) & ~cells["model"].isin(names)
    ]
    if cells.empty:
        return None
    table = Table([f"model · {PAPER_LABEL}", "set", *tasks])
    for model in sorted(cells["model"].unique()):
        for set_name in ("ID", "OOD"):
            mine = cells[(cells["model"] == model) & (cells["set"] == set_name)]
            mine = mine.drop_duplicates("task").set_index("task").reindex(tasks)
            if mine["mean"].isna().all():
                continue
            row: list[Cell | str] = [Cell(model), Cell(set_name)]
            row += [Cell(mean_sd(m, sd)) for m, sd in zip(mine["mean"], mine["std"], strict=True)]
            table.add(row, "paper")
    return table


# the extrapolation measures the index page shows: (metric, row) -> title, higher is better
EXTRAPOLATION = {
    ("extrapolation", "OOD/ID"): ("OOD/ID RMSE ratio", False),
    ("stretched", "OOD"): ("OOD RMSE, stretched by the validation line", False),
    ("discovery", "high tail"): ("discovery, high tail (precision at k)", True),
    ("discovery", "low tail"): ("discovery, low tail (precision at k)", True),
}


def measure_table(
    summary: pd.DataFrame, metric: str, row: str, task_href: Callable[[str], str]
) -> Table:
    """Models × tasks of one measure of the summary (mean ± sd over seeds), the best and
    worst unflagged model of each task marked."""
    cells = summary[(summary["metric"] == metric) & (summary["set"] == row)]
    higher = EXTRAPOLATION[(metric, row)][1]
    benchmarks = sorted(cells["benchmark"].unique())
    table = Table(["model", *[link(task_href(b), b) for b in benchmarks]])
    extremes = {b: _extremes(cells[cells["benchmark"] == b], higher) for b in benchmarks}
    for model in sorted(cells["model"].unique()):
        mine = cells[cells["model"] == model].set_index("benchmark").reindex(benchmarks)
        table.add(
            [
                model,
                *[
                    Cell(
                        mean_sd(c["mean"], c["std"], c["n_seeds"]),
                        "",
                        () if flags(model) else _marks(c["mean"], *extremes[b]),
                    )
                    for b, c in mine.iterrows()
                ],
            ]
        )
    return table


def provenance_table(trace: pd.DataFrame, href: Callable[[str, str], str]) -> Table:
    """Where each leaderboard cell comes from: runs, seeds, split hash, flags, folders."""
    table = Table(["task", "model", "runs", "seeds", "split hash", "flags", "run folders"])
    for (benchmark, model), row in trace.iterrows():
        folders = "<br>".join(str(p).removesuffix("/metrics.json") for p in row["paths"])
        table.add(
            [
                href("benchmark", benchmark),
                href("model", model),
                Cell(str(row["runs"])),
                Cell(row["seeds"]),
                Cell(row["split_hash"]),
                Cell(row["flags"]),
                f"<small>{folders}</small>",
            ]
        )
    return table


def by_representation(summary: pd.DataFrame, names: dict[str, str]) -> pd.DataFrame:
    """BOOM Table 1's numbers for our runs: per task, set and representation group, the
    mean over full-run models of their seed-mean RMSE, and how many models."""
    full = summary["model"].map(lambda m: not flags(m))
    rmse = summary[(summary["metric"] == "rmse") & full]
    rmse = rmse.assign(representation=[representation(names[m]) for m in rmse["model"]])
    rmse = rmse[rmse["representation"] != UNKNOWN]
    grouped = rmse.groupby(["benchmark", "task", "set", "representation"])["mean"]
    return grouped.agg(rmse="mean", models="count").reset_index()


def representation_table(ours: pd.DataFrame, task_href: Callable[[str], str]) -> Table:
    """Table 1: rows group × set, columns tasks; the paper's row under ours."""
    paper = paper_by_representation()
    benchmarks = sorted(ours["benchmark"].unique())
    tasks = ours.drop_duplicates("benchmark").set_index("benchmark")["task"]
    table = Table(["representation", "set", *[link(task_href(b), b) for b in benchmarks]])
    for group in ORDER:
        for set_name in ("ID", "OOD"):
            mine = ours[(ours["representation"] == group) & (ours["set"] == set_name)]
            mine = mine.set_index("benchmark").reindex(benchmarks)
            if mine["rmse"].isna().all():
                continue
            table.add(
                [Cell(group), Cell(set_name)]
                + [
                    Cell(number(r), f"mean over {int(n) if np.isfinite(n) else 0} model(s)")
                    for r, n in zip(mine["rmse"], mine["models"], strict=True)
                ]
            )
            theirs = paper[(paper["representation"] == group) & (paper["set"] == set_name)]
            theirs = theirs.set_index("task")["rmse"].reindex(tasks[benchmarks].to_numpy())
            if theirs.notna().any():
                table.add(
                    [
                        Cell(f"{group} · {PAPER_LABEL}"),
                        Cell(set_name),
                        *[Cell(number(v)) for v in theirs],
                    ],
                    "paper",
                )
    return table


def paper_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The comparison rows that have a paper number: paper_comparison.csv."""
    keep = [
        *GROUP,
        "metric",
        "set",
        "mean",
        "std",
        "n_seeds",
        "paper_mean",
        "paper_std",
        "paper_table",
        "ratio",
    ]
    return frame[frame["paper_mean"].notna()][keep]
