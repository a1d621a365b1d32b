"""oodmol campaign-report: recall of the pool's top molecules against molecules acquired,
one line per acquisition rule, from the round records of campaigns.

oodmol campaign-report <campaign folders or folders holding them ...> --out <dir>

Writes <dir>/campaigns.csv (per task, model, direction, rule and round: the campaigns'
count, the mean and sd of recall, best value found and OOD RMSE on the remaining pool) and
<dir>/campaigns.png|svg (one panel per task, model and direction; the dotted line is the
recall a random batch has on average: acquired / pool size).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from oodmol.bounded import read_json
from oodmol.errors import InputError, MissingFileError
from oodmol.plotting import new_figure

GROUP = ["task", "model", "direction"]


def campaign_rows(folders: list[Path]) -> pd.DataFrame:
    """One row per recorded round of every campaign below `folders`."""
    rows = []
    for top in folders:
        if not Path(top).is_dir():
            raise MissingFileError(f"{top}: no such folder")
        for description in sorted(Path(top).rglob("campaign.json")):
            try:
                rows += _rows_of(description.parent, read_json(description, "campaign"))
            except (KeyError, TypeError, ValueError, AttributeError) as error:
                raise InputError(
                    f"{description.parent}: not a campaign folder as oodmol campaign writes "
                    f"it ({type(error).__name__}: {error})"
                ) from None
    if not rows:
        raise InputError(f"no recorded campaign round below {[str(f) for f in folders]}")
    return pd.DataFrame(rows)


def _rows_of(folder: Path, description: dict) -> list[dict]:
    pool = (
        read_json(folder / "pool.json", "campaign pool") if (folder / "pool.json").is_file() else {}
    )
    model = description["model"] + ("" if description["uq"] == "none" else f"+{description['uq']}")
    common = {
        "task": description["task"],
        "model": model,
        "direction": description["settings"]["direction"],
        "acquisition": description["settings"]["acquisition"],
        "seed": description["seed"],
        "n_pool": len(pool.get("mol_id", [])),
        "campaign": str(folder),
    }
    rows = []
    for path in sorted((folder / "rounds").glob("*.json"), key=lambda p: int(p.stem)):
        record = read_json(path, "campaign round")
        rows.append(
            {
                **common,
                **{k: record[k] for k in ("round", "n_acquired", "recall", "best_found")},
                "ood_rmse": record["ood_rmse"],
            }
        )
    return rows


def campaign_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Per task, model, direction, rule and round: campaigns, mean and sd of recall, best
    value found and OOD RMSE. The campaigns of a row must have acquired alike."""
    keys = [*GROUP, "acquisition", "round"]
    out = []
    for key, group in rows.groupby(keys, sort=True):
        acquired = group["n_acquired"].unique()
        if len(acquired) != 1:
            raise InputError(f"{dict(zip(keys, key, strict=True))}: campaigns acquired {acquired}")
        out.append(
            {
                **dict(zip(keys, key, strict=True)),
                "n_acquired": int(acquired[0]),
                "n_pool": int(group["n_pool"].iloc[0]),
                "campaigns": len(group),
                **{
                    f"{name}_{stat}": getattr(group[name], stat)()
                    for name in ("recall", "best_found", "ood_rmse")
                    for stat in ("mean", "std")
                },
            }
        )
    return pd.DataFrame(out)


def campaign_figure(table: pd.DataFrame) -> Figure:
    """Mean recall against molecules acquired, from (0, 0), one line per rule; a panel per
    task, model and direction."""
    panels = list(table.groupby(GROUP, sort=True))
    figure = new_figure()
    figure.set_size_inches(4.5 * len(panels), 4.0)
    for index, ((task, model, direction), panel) in enumerate(panels):
        ax = figure.add_subplot(1, len(panels), index + 1)
        for rule, line in panel.groupby("acquisition", sort=True):
            x = np.concatenate([[0], line["n_acquired"]])
            y = np.concatenate([[0.0], line["recall_mean"]])
            ax.plot(x, y, "o-", ms=3, label=rule)
        n_pool, most = panel["n_pool"].iloc[0], panel["n_acquired"].max()
        if n_pool:
            ax.plot([0, most], [0, most / n_pool], ":", color="grey", label="random, expected")
        ax.set_title(f"{task}, {model}, {direction}", fontsize=9)
        ax.set_xlabel("molecules acquired")
        ax.set_ylabel("recall of the pool's top molecules")
        ax.set_ylim(-0.02, 1.02)
        ax.legend(fontsize=7)
    return figure
