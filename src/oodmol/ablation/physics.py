"""Physics against learning out of distribution: per task, physics alone (`model=mean
baseline=physics`), the best oodmol model without physics, the best with it (Δ-learning
or the estimates as features), each beside BOOM's best model of the task (its Tables 7
and 9), with their OOD/ID ratios; and a figure of OOD RMSE relative to BOOM's best.

    oodmol ablation physics <runs> --out <dir>
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from oodmol.errors import InputError
from oodmol.report.boom_reference import boom_paper
from oodmol.report.collect import collect_runs
from oodmol.report.tables import flags

PHYSICS_ALONE = "mean Δphysics"
KINDS = ("physics alone", "best without physics", "best with physics")


def physics_rows(runs_dir) -> pd.DataFrame:
    """One row per model label and task of the folder's full runs (no [flag]): mean OOD
    and ID RMSE over seeds, seeds, and whether the model uses physics."""
    runs = collect_runs(runs_dir).runs
    if runs.empty:
        raise InputError(f"{runs_dir}: no complete run (metrics.json with test metrics) below it")
    runs = runs[[not flags(m) for m in runs["model"]]]
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


def uses_physics(label: str) -> bool:
    """A model that reads the physics estimates: as its baseline or as its features."""
    return "Δphysics" in label or label.startswith("physics-")


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
            "boom_model": best["model"],
            "boom_ood_rmse": best["OOD"],
            "boom_ratio": best["OOD"] / best["ID"],
        }
    ).set_index("task")


def physics_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Per task: each kind's best model, OOD RMSE and OOD/ID, beside BOOM's best."""
    boom = boom_best()
    out = []
    for task, part in rows.groupby("task"):
        line: dict = {"task": task}
        chosen = {
            "physics alone": part[part["model"] == PHYSICS_ALONE],
            "best without physics": part[~part["physics"]],
            "best with physics": part[part["physics"] & (part["model"] != PHYSICS_ALONE)],
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
    table["best oodmol / BOOM"] = best_ours / table.get("boom_ood_rmse", np.nan)
    return table


def physics_figure(table: pd.DataFrame) -> plt.Figure:
    """OOD RMSE of each kind over BOOM's best, per task (below 1: better than BOOM)."""
    tasks = list(table.index)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.8 * len(tasks) + 2), 3.6))
    width = 0.8 / len(KINDS)
    for i, kind in enumerate(KINDS):
        ratio = table[f"{kind}: OOD RMSE"] / table["boom_ood_rmse"]
        ax.bar(np.arange(len(tasks)) + (i - 1) * width, ratio, width, label=kind)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks(np.arange(len(tasks)), tasks, rotation=40, ha="right")
    ax.set_yscale("log")
    ax.set_ylabel("OOD RMSE / BOOM's best")
    ax.legend(frameon=False, fontsize=8)
    fig.tight_layout()
    return fig
