"""BOOM's Fig. 7 from runs of `split=ood_augmented`: OOD RMSE on the fixed hold-out
against the number of OOD molecules added to training, divided (as BOOM does) by the
RMSE of the same model and task without any (N = 0); the mean over seeds each time."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from oodmol.ablation.runs import Run
from oodmol.errors import InputError
from oodmol.plotting import new_figure

SPLIT = "ood_augmented"


def augmentation_rows(runs: list[Run]) -> pd.DataFrame:
    """One row per run of the augmented split: task, model, seed, N, hold-out size, RMSE."""
    rows = [
        {
            "task": run.metrics["task"],
            "model": run.metrics["model"],
            "seed": run.metrics.get("seed"),
            "n_augment": int(run.setting("split", "n_augment")),
            "n_holdout": run.metrics["ood"]["n"],
            "ood_rmse": run.metrics["ood"]["rmse"],
        }
        for run in runs
        if run.metrics.get("split") == SPLIT
    ]
    if not rows:
        raise InputError(f"no complete run of split={SPLIT} found")
    return pd.DataFrame(rows)


def augmentation_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Per task, model and N: seeds, mean and sd of the OOD RMSE, and the mean divided by
    the N = 0 mean. Every N of a task must be scored on one hold-out (same size)."""
    out = []
    for (task, model), group in rows.groupby(["task", "model"], sort=True):
        sizes = group["n_holdout"].unique()
        if len(sizes) != 1:
            shown = sorted(sizes.tolist())
            raise InputError(f"{task}/{model}: runs scored on hold-outs of sizes {shown}")
        stats = group.groupby("n_augment")["ood_rmse"].agg(["count", "mean", "std"])
        if 0 not in stats.index:
            raise InputError(f"{task}/{model}: no run with n_augment=0 to normalise by")
        for n, row in stats.iterrows():
            out.append(
                {
                    "task": task,
                    "model": model,
                    "n_augment": int(n),
                    "seeds": int(row["count"]),
                    "ood_rmse_mean": row["mean"],
                    "ood_rmse_sd": row["std"],
                    "normalised_ood_rmse": row["mean"] / stats.loc[0, "mean"],
                    "n_holdout": int(sizes[0]),
                }
            )
    return pd.DataFrame(out)


def augmentation_figure(table: pd.DataFrame) -> Figure:
    """Normalised hold-out RMSE against N (symmetric-log axis: N = 0 is on it)."""
    figure = new_figure()
    ax = figure.add_subplot()
    for (task, model), group in table.groupby(["task", "model"], sort=True):
        ax.plot(group["n_augment"], group["normalised_ood_rmse"], "o-", label=f"{model} {task}")
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    positive = table.loc[table["n_augment"] > 0, "n_augment"]
    ax.set_xscale("symlog", linthresh=float(np.min(positive)) if len(positive) else 1.0)
    ax.set_xlabel("OOD molecules added to training (N)")
    ax.set_ylabel("OOD RMSE on the hold-out / RMSE at N = 0")
    ax.legend(fontsize=7)
    return figure
