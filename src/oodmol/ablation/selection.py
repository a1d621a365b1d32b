"""Honest OOD model selection: one search's draws chosen three ways.

BOOM chose its "best OOD hyperparameters" by OOD *test* RMSE (its Fig. 6), which lets
the test set choose the model. Every trial of `experiment=selection` records the best
loss of both of its validation sets (`metrics.json`, `validation`): the random ID
validation set (`val`) and the pseudo-OOD one cut from the training pool's own KDE tails
(`val_tail`, `split.val=tail`). Per task and model the draw with the lowest loss on each
is selected, and the draw with the lowest OOD test RMSE as BOOM did (an upper bound that
leaks the test set). The tail selection's share of BOOM's gain is

    recovered = (RMSE_id-val - RMSE_tail-val) / (RMSE_id-val - RMSE_ood-test)

of the selected draws' OOD test RMSE: 1 when the tail set picks what the test set picks,
0 when it picks no better than ID validation, negative when worse; undefined (NaN) where
ID validation already picks the test set's choice.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from oodmol.ablation.runs import Run
from oodmol.errors import InputError
from oodmol.plotting import new_figure

RULES = {  # selection rule -> the column of a draw it minimises
    "id_val": "val_id_loss",
    "tail_val": "val_tail_loss",
    "ood_test": "ood_rmse",
}
LABELS = {
    "id_val": "ID validation",
    "tail_val": "tail validation",
    "ood_test": "OOD test (BOOM: leaks the test set, upper bound)",
}


def selection_rows(runs: list[Run], root) -> pd.DataFrame:
    """One row per tested draw that scored both validation sets: task, model, its folder
    (relative to `root`), both validation sets' best loss, ID and OOD test RMSE."""
    rows = []
    for run in runs:
        sets = (run.metrics.get("validation") or {}).get("sets") or {}
        if not {"val", "val_tail"} <= set(sets):
            continue
        rows.append(
            {
                "task": run.metrics["task"],
                "model": run.metrics["model"],
                "run": str(run.folder.relative_to(root)),
                "val_id_loss": sets["val"]["best_loss"],
                "val_tail_loss": sets["val_tail"]["best_loss"],
                "id_rmse": run.metrics["id"]["rmse"],
                "ood_rmse": run.metrics["ood"]["rmse"],
            }
        )
    if not rows:
        raise InputError(
            "no complete run scored both validation sets (split.val=tail with its trials "
            "tested: experiment=selection)"
        )
    return pd.DataFrame(rows)


def selection_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Per task and model: the draws, and for each rule the selected draw and its OOD
    (and ID) test RMSE; BOOM's test-selected gain over ID validation and the share of it
    the tail selection recovers. Ties go to the first draw in folder order."""
    out = []
    for (task, model), group in rows.groupby(["task", "model"], sort=True):
        group = group.sort_values("run", kind="stable").reset_index(drop=True)
        row: dict = {"task": task, "model": model, "draws": len(group)}
        for rule, column in RULES.items():
            chosen = group.loc[int(np.argmin(group[column].to_numpy()))]
            row[f"{rule}_run"] = chosen["run"]
            row[f"{rule}_ood_rmse"] = chosen["ood_rmse"]
            row[f"{rule}_id_rmse"] = chosen["id_rmse"]
        gain = row["id_val_ood_rmse"] - row["ood_test_ood_rmse"]
        row["test_selected_gain"] = gain
        row["tail_recovered_share"] = (
            (row["id_val_ood_rmse"] - row["tail_val_ood_rmse"]) / gain if gain > 0 else np.nan
        )
        out.append(row)
    return pd.DataFrame(out)


def selection_figure(table: pd.DataFrame) -> Figure:
    """OOD test RMSE of the draw each rule selects, per task and model; the test-set
    rule hatched (it is not a selection anyone can make honestly)."""
    figure = new_figure()
    ax = figure.add_subplot()
    x = np.arange(len(table))
    width = 0.27
    for i, rule in enumerate(RULES):
        leaks = rule == "ood_test"
        bars = ax.bar(
            x + (i - 1) * width,
            table[f"{rule}_ood_rmse"],
            width,
            label=LABELS[rule],
            hatch="//" if leaks else None,
            fill=not leaks,
            edgecolor="black" if leaks else None,
        )
        if rule == "tail_val":
            shares = table["tail_recovered_share"]
            labels = ["n/a" if np.isnan(v) else f"{v:.0%}" for v in shares]
            ax.bar_label(bars, labels=labels, fontsize=7, padding=2)
    ax.set_xticks(x, [f"{m}\n{t}" for t, m in zip(table["task"], table["model"], strict=True)])
    ax.set_ylabel("OOD test RMSE of the selected draw")
    ax.set_title("Selecting a search's draw (label: share of BOOM's gain recovered)", fontsize=9)
    ax.legend(fontsize=7)
    return figure
