"""Learning curves (BenchML's question, asked of the OOD tail): does OOD error fall with
training data at the rate ID error does?

Runs of `split.subset=[fraction, repeat]` (experiment=learning_curve) train on nested
seeded subsets of one training split and are scored on the same ID and OOD test sets.
Per task, model and test set the RMSE is fitted as a power law of the training set size,
RMSE = a · n^b, by least squares on log RMSE against log n over every run (each repeat a
point): b is the slope of the log–log curve, about -1/2 for a model that learns as
sampling noise falls, near 0 where more data of the same kind does not help.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from oodmol.ablation.runs import Run
from oodmol.errors import InputError
from oodmol.plotting import SET_LABELS, new_figure


def learning_curve_rows(runs: list[Run]) -> pd.DataFrame:
    """One row per run on a training subset: task, model, fraction, repeat, the training
    molecules it used, split hash, and its ID and OOD RMSE."""
    rows = []
    for run in runs:
        try:
            subset = run.setting("split", "subset")
        except KeyError:
            continue
        if subset is None:
            continue
        data = run.metrics.get("data", {})
        sizes = data.get("sizes_used") or data.get("sizes") or {}
        rows.append(
            {
                "task": run.metrics["task"],
                "model": run.metrics["model"],
                "fraction": float(subset[0]),
                "repeat": int(subset[1]),
                "n_train": int(sizes["train"]),
                "split_hash": run.metrics.get("split_hash"),
                "id_rmse": run.metrics["id"]["rmse"],
                "ood_rmse": run.metrics["ood"]["rmse"],
                "n_id": run.metrics["id"].get("n"),
                "n_ood": run.metrics["ood"].get("n"),
            }
        )
    if not rows:
        raise InputError("no complete run of a training subset (split.subset=[fraction, repeat])")
    return pd.DataFrame(rows)


def power_law(n: np.ndarray, rmse: np.ndarray) -> tuple[float, float]:
    """(a, b) of RMSE = a · n^b, least squares in log–log; needs two distinct sizes."""
    x, y = np.log(np.asarray(n, float)), np.log(np.asarray(rmse, float))
    if len(np.unique(x)) < 2:
        raise InputError("a slope needs runs of at least two training set sizes")
    slope, intercept = np.polyfit(x, y, 1)
    return float(np.exp(intercept)), float(slope)


def learning_curve_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Per task, model, test set and fraction: training size, repeats, mean and sd of the
    RMSE; and the set's fitted power law (`slope`, `prefactor`), repeated on its rows.
    Every run of a task must be scored on the same ID and OOD test sets (sizes)."""
    out = []
    for (task, model), group in rows.groupby(["task", "model"], sort=True):
        for column in ("n_id", "n_ood"):
            if group[column].nunique() > 1:
                sizes = sorted(group[column].unique().tolist())
                raise InputError(f"{task}/{model}: runs scored on test sets of sizes {sizes}")
        out += curve_statistics(group, {"task": task, "model": model})
    return pd.DataFrame(out)


def curve_statistics(group: pd.DataFrame, keys: dict) -> list[dict]:
    """The rows of one learning curve's runs (`n_train`, `repeat`, `fraction`,
    `id_rmse`, `ood_rmse`): per test set and fraction, training size, repeats, mean and
    sd of the RMSE, and the set's power law fitted over every run, each row led by
    `keys` (what the curve is of)."""
    out = []
    for name, label in SET_LABELS.items():
        a, b = power_law(group["n_train"], group[f"{name}_rmse"])
        stats = group.groupby("fraction").agg(
            n_train=("n_train", "mean"),
            repeats=("repeat", "nunique"),
            rmse_mean=(f"{name}_rmse", "mean"),
            rmse_sd=(f"{name}_rmse", "std"),
        )
        for fraction, row in stats.iterrows():
            out.append(
                {
                    **keys,
                    "set": label,
                    "fraction": fraction,
                    "n_train": row["n_train"],
                    "repeats": int(row["repeats"]),
                    "rmse_mean": row["rmse_mean"],
                    "rmse_sd": row["rmse_sd"],
                    "slope": b,
                    "prefactor": a,
                }
            )
    return out


def learning_curve_figure(table: pd.DataFrame) -> Figure:
    """Mean RMSE (± sd over repeats) against training size, log–log; ID dashed, OOD
    solid, one colour per task and model, the fitted power law beside each in the legend."""
    figure = new_figure()
    ax = figure.add_subplot()
    groups = table.groupby(["task", "model"], sort=True)
    colours = {key: f"C{i}" for i, key in enumerate(groups.groups)}
    for (task, model, label), group in table.groupby(["task", "model", "set"], sort=True):
        n, colour = group["n_train"].to_numpy(), colours[(task, model)]
        style = "--" if label == "ID" else "-"
        ax.errorbar(
            n, group["rmse_mean"], yerr=group["rmse_sd"].fillna(0.0), fmt="o", color=colour, ms=3
        )
        grid = np.geomspace(n.min(), n.max(), 50)
        a, b = group["prefactor"].iloc[0], group["slope"].iloc[0]
        ax.plot(grid, a * grid**b, style, color=colour, label=f"{model} {task} {label}: {b:+.2f}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("training molecules")
    ax.set_ylabel("test RMSE")
    ax.set_title("Learning curves (legend: fitted log–log slope)", fontsize=9)
    ax.legend(fontsize=7)
    return figure
