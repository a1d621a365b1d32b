"""Figures of a runs folder for notebooks/analysis.ipynb: parity plots of every run's
predictions, and ID R² against OOD binned R² per model and task.

Both take what the leaderboard computes (`collect_runs`, `label_benchmarks`,
`summarize`), so the notebook's figures and the tables always show the same runs.
"""

from __future__ import annotations

import warnings
from itertools import product
from pathlib import Path

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from oodmol.plotting import SET_COLORS

MARKERS = "osD^vP*Xh<>p"
# columns of predictions.csv that only some runs have (σ only where the run has one)
OPTIONAL = ("mol_id", "y_std")


def draw_parity(ax: Axes, panel: pd.DataFrame, low: float, high: float) -> None:
    """The diagonal from `low` to `high` and the panel's ID and OOD points on it."""
    ax.plot([low, high], [low, high], color="black", linewidth=0.8)
    for set_name, colour in SET_COLORS.items():
        points = panel[panel["set"] == set_name]
        ax.scatter(
            points["y_true"],
            points["y_pred"],
            s=6,
            alpha=0.6,
            color=colour,
            linewidths=0,
            label=set_name.upper(),
        )


def read_predictions(runs: pd.DataFrame) -> pd.DataFrame:
    """The ID and OOD rows of the predictions.csv beside each run's metrics.json, with
    the run's benchmark, model (leaderboard label) and seed.

    `mol_id` and the run's σ (`y_std`) come along where the file has them (NaN
    otherwise). `runs` comes from `label_benchmarks`. A run without the file is left out with a
    warning naming it, so that a figure never silently shows fewer runs than the tables.
    """
    columns = ["benchmark", "model", "seed", "set", "mol_id", "y_true", "y_pred", "y_std"]
    frames = []
    for run in runs[["path", "benchmark", "model", "seed"]].itertuples(index=False):
        file = Path(run.path).with_name("predictions.csv")
        if not file.is_file():
            warnings.warn(f"{file} is missing: run left out of the parity plots", stacklevel=2)
            continue
        frame = pd.read_csv(file, usecols=lambda c: c in OPTIONAL or c in columns)
        frame = frame[frame["set"].isin(list(SET_COLORS))]
        frames.append(frame.assign(benchmark=run.benchmark, model=run.model, seed=run.seed))
    if not frames:
        return pd.DataFrame(columns=columns)
    return pd.concat(frames, ignore_index=True).reindex(columns=columns)


def parity_grid(predictions: pd.DataFrame) -> Figure:
    """Predicted against true values: one row of panels per benchmark, one column per
    model, ID and OOD points in their colours, all seeds pooled. Panels of a row share
    their limits, so that models of one task compare at a glance; the diagonal is a
    perfect prediction."""
    benchmarks = sorted(predictions["benchmark"].unique())
    models = sorted(predictions["model"].unique())
    fig = Figure(
        figsize=(0.5 + 2.6 * len(models), 0.5 + 2.6 * len(benchmarks)), layout="constrained"
    )
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(benchmarks), len(models), squeeze=False)
    for (row, benchmark), (column, model) in product(enumerate(benchmarks), enumerate(models)):
        ax = axes[row, column]
        task = predictions[predictions["benchmark"] == benchmark]
        low = min(task["y_true"].min(), task["y_pred"].min())
        high = max(task["y_true"].max(), task["y_pred"].max())
        draw_parity(ax, task[task["model"] == model], low, high)
        ax.set(xlim=(low, high), ylim=(low, high), aspect="equal")
        ax.set_title(model if row == 0 else "", fontsize=9)
        ax.set_xlabel("true" if row == len(benchmarks) - 1 else "")
        ax.set_ylabel(f"{benchmark}\npredicted" if column == 0 else "")
    axes[0, 0].legend(fontsize=8, markerscale=2)
    return fig


def id_vs_ood_scatter(summary: pd.DataFrame) -> Figure:
    """Seed-mean ID R² against seed-mean OOD binned R², one point per model (colour) and
    benchmark (marker). On the diagonal a model extrapolates as well as it interpolates;
    how far below it a point sits is what it loses out of distribution."""
    r2 = summary[summary["metric"] == "r2"].pivot(
        index=["benchmark", "model"], columns="set", values="mean"
    )
    r2 = r2.dropna(subset=["ID", "OOD"]).reset_index()
    models = sorted(r2["model"].unique())
    benchmarks = sorted(r2["benchmark"].unique())
    colour = {model: f"C{i % 10}" for i, model in enumerate(models)}
    marker = {benchmark: MARKERS[i % len(MARKERS)] for i, benchmark in enumerate(benchmarks)}

    fig = Figure(figsize=(6.5, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for point in r2.itertuples(index=False):
        ax.scatter(point.ID, point.OOD, color=colour[point.model], marker=marker[point.benchmark])
    low = min(r2["ID"].min(), r2["OOD"].min(), 0.0)
    ax.plot([low, 1], [low, 1], color="grey", linewidth=0.8, linestyle="--")
    ax.set_xlabel("ID R²")
    ax.set_ylabel("OOD binned R²")
    handles = [Line2D([], [], color=colour[m], marker="o", linestyle="", label=m) for m in models]
    handles += [
        Line2D([], [], color="grey", marker=marker[b], linestyle="", label=b) for b in benchmarks
    ]
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1))
    return fig
