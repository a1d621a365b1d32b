"""Physics against learning out of distribution, a part of the leaderboard (`oodmol
report`) wherever a folder holds runs that read the physics estimates: per task, physics
alone (`model=mean baseline=physics`), the best model without physics and the best with
it (Δ-learning or the estimates as features), each beside BOOM's best model of the task
(its Tables 7 and 9), with their OOD/ID ratios (physics.csv, physics.md); and a figure of
OOD RMSE relative to BOOM's best (physics.png, physics.svg). A run's predictions stretched
by its validation line compete as a model of their own ("<label> (stretched)").
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from oodmol.plotting import save_figure
from oodmol.report.boom_reference import boom_paper
from oodmol.report.tables import flags

BOOM_MODEL, BOOM_OOD, BOOM_RATIO = (
    "BOOM's best: model",
    "BOOM's best: OOD RMSE",
    "BOOM's best: OOD/ID",
)
FULL_RUN_FLAGS = {"left_out"}
KINDS = ("physics alone", "best without physics", "best with physics")


def physics_rows(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per model label and task of the collected full runs: mean OOD and ID RMSE
    over seeds, seeds, and whether the model uses physics. A run that left out molecules
    it could not represent (`[left_out]`: no conformer, an SCF that failed; named in its
    record) is a full run and keeps its flag in its label; a subset or a shortened run is
    not one."""
    runs = runs[[set(flags(m)) <= FULL_RUN_FLAGS for m in runs["model"]]]
    runs = pd.concat([runs, stretched_runs(runs)], ignore_index=True)
    rows = (
        runs.groupby(["task", "model"])
        .agg(
            ood_rmse=("ood.rmse", "mean"),
            id_rmse=("id.rmse", "mean"),
            seeds=("seed", "nunique"),
        )
        .reset_index()
    )
    rows["ratio"] = rows["ood_rmse"] / rows["id_rmse"]
    rows["physics"] = rows["model"].map(uses_physics)
    return rows


def stretched_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Each run that recorded its stretch by the validation line (`oodmol.metrics.stretch`)
    once more, as a model of its own: "<label> (stretched)", with the stretched metrics."""
    if "stretched.ood.rmse" not in runs:
        return runs.iloc[:0]
    stretched = runs[runs["stretched.ood.rmse"].notna()].copy()
    for name in ("id.rmse", "ood.rmse"):
        stretched[name] = stretched[f"stretched.{name}"].astype(float)
    stretched["model"] = stretched["model"].map(_stretched_label)
    return stretched


def _stretched_label(label: str) -> str:
    """ "<label> (stretched)", its flags kept last ("rf [left_out]" → "rf (stretched)
    [left_out]")."""
    name, bracket, flagged = label.partition(" [")
    return f"{name} (stretched){bracket}{flagged}"


def _unflagged(label: str) -> str:
    """The label without its flags ("mean Δphysics [left_out]" → "mean Δphysics")."""
    return label.split(" [")[0]


def physics_alone(label: str) -> bool:
    """The training mean with a Δ-learning baseline: the baseline's line alone ("mean
    Δphysics", "mean Δphysics_descriptors (fit=calibration) (weighting=tails)")."""
    words = _unflagged(label).split(" ")
    return words[0] == "mean" and any(word.startswith("Δ") for word in words)


def uses_physics(label: str) -> bool:
    """A model that reads the physics estimates: as its baseline, or in its representation
    ("physics-krr_rbf", "descriptors_physics-ridge")."""
    name = _unflagged(label).split(" ")[0]
    representation = name.rpartition("-")[0]
    return "Δphysics" in label or "physics" in representation.split("_")


def boom_best() -> pd.DataFrame:
    """BOOM's best model of every task by OOD RMSE (Tables 7 and 9), with its OOD/ID."""
    paper = boom_paper()
    table = pd.concat([paper.tables["table7"], paper.tables["table9"]], ignore_index=True)
    wide = table.pivot_table(index=["task", "model"], columns="set", values="rmse").reset_index()
    wide = wide.dropna(subset=["OOD"])
    best = wide.loc[wide.groupby("task")["OOD"].idxmin()]
    return pd.DataFrame(
        {
            "task": best["task"],
            BOOM_MODEL: best["model"],
            BOOM_OOD: best["OOD"],
            BOOM_RATIO: best["OOD"] / best["ID"],
        }
    ).set_index("task")


def physics_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Per task: each kind's best model, OOD RMSE and OOD/ID, beside BOOM's best."""
    boom = boom_best()
    out = []
    for task, part in rows.groupby("task"):
        line: dict = {"task": task}
        chosen = {
            "physics alone": part[part["model"].map(physics_alone)],
            "best without physics": part[~part["physics"]],
            "best with physics": part[part["physics"] & ~part["model"].map(physics_alone)],
        }
        for kind, candidates in chosen.items():
            best = candidates.loc[candidates["ood_rmse"].idxmin()] if len(candidates) else None
            line[f"{kind}: model"] = None if best is None else best["model"]
            line[f"{kind}: OOD RMSE"] = math.nan if best is None else best["ood_rmse"]
            line[f"{kind}: OOD/ID"] = math.nan if best is None else best["ratio"]
        if task in boom.index:
            line |= boom.loc[task].to_dict()
        out.append(line)
    table = pd.DataFrame(out).set_index("task")
    best_ours = table[[f"{k}: OOD RMSE" for k in KINDS]].min(axis=1)
    table["best oodmol / BOOM"] = best_ours / table.get(BOOM_OOD, np.nan)
    return table


def write_physics(runs: pd.DataFrame, out: Path) -> list[Path]:
    """The table (CSV, Markdown) and figure where any run reads the physics estimates."""
    rows = physics_rows(runs)
    if not rows["physics"].any():
        return []
    table = physics_table(rows)
    table.reset_index().to_csv(out / "physics.csv", index=False)
    (out / "physics.md").write_text(markdown(table))
    figure = save_figure(physics_figure(table), out / "physics")
    return [out / "physics.csv", out / "physics.md", *figure]


def markdown(table: pd.DataFrame) -> str:
    """The table as Markdown: a row per task, 4 significant digits, "–" where a kind has
    no run."""
    frame = table.reset_index()

    def cell(value) -> str:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "–"
        return f"{value:.4g}" if isinstance(value, float) else str(value)

    lines = [
        "## Physics against learning: OOD RMSE per task beside BOOM's best",
        "",
        "| " + " | ".join(frame.columns) + " |",
        "|" + "---|" * len(frame.columns),
        *("| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)),
    ]
    return "\n".join(lines) + "\n"


def physics_figure(table: pd.DataFrame) -> plt.Figure:
    """OOD RMSE of each kind over BOOM's best, per task (below 1: better than BOOM)."""
    tasks = list(table.index)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.8 * len(tasks) + 2), 3.6))
    width = 0.8 / len(KINDS)
    for i, kind in enumerate(KINDS):
        ratio = table[f"{kind}: OOD RMSE"] / table[BOOM_OOD]
        ax.bar(np.arange(len(tasks)) + (i - 1) * width, ratio, width, label=kind)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks(np.arange(len(tasks)), tasks, rotation=40, ha="right")
    ax.set_yscale("log")
    ax.set_ylabel("OOD RMSE / BOOM's best")
    ax.legend(frameon=False, fontsize=8)
    fig.tight_layout()
    return fig
