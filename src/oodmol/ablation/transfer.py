"""BOOM's Fig. 5 from runs of `experiment=boom_transfer`: the OOD RMSE of a model
fine-tuned from another property's pretraining (metrics.json `transfer`), divided by the
OOD RMSE of the same model trained on the target alone with the same budget, against
the Pearson correlation of the two properties over their common molecules, computed from
the data. Fine-tuned and un-pretrained runs are paired by task, model, split (its hash),
epoch budget and OOD set size; each side is the mean over its seeds."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
from hydra.utils import instantiate
from matplotlib.figure import Figure
from omegaconf import OmegaConf

import oodmol.config  # noqa: F401  (registers the resolvers task configs use)
from oodmol.ablation.runs import Run
from oodmol.data.task import load_task
from oodmol.errors import InputError
from oodmol.plotting import new_figure
from oodmol.stored_config import rebuild

Correlation = Callable[[dict, dict], float]


def _pairing(run: Run) -> tuple:
    m = run.metrics
    return (
        m["task"],
        m["model"],
        m["split_hash"],
        m.get("training", {}).get("max_epochs"),
        m["ood"]["n"],
    )


def transfer_table(runs: list[Run], correlation: Correlation) -> pd.DataFrame:
    """One row per (source, target, model): seeds on each side, mean OOD RMSEs, their
    ratio and the properties' Pearson correlation (`correlation(source, target)` of the
    two task configs recorded in the fine-tuned run)."""
    scratch: dict[tuple, list[float]] = {}
    tuned: dict[tuple, list[Run]] = {}
    for run in runs:
        transfer = run.metrics.get("transfer") or {}
        source = transfer.get("init_from")
        if source is None:
            if run.metrics.get("split") == "ood":
                scratch.setdefault(_pairing(run), []).append(run.metrics["ood"]["rmse"])
            continue
        tuned.setdefault((source["task"], *_pairing(run)), []).append(run)
    if not tuned:
        raise InputError("no fine-tuned run (metrics.json with transfer.init_from) found")
    rows = []
    for (source, *pairing), group in sorted(tuned.items(), key=lambda kv: str(kv[0])):
        baseline = scratch.get(tuple(pairing))
        target, model = pairing[0], pairing[1]
        if not baseline:
            raise InputError(
                f"{source} -> {target} ({model}): no un-pretrained run of the same task, "
                f"model, split, epoch budget and OOD set to normalise by"
            )
        transfer = group[0].metrics["transfer"]
        tuned_rmse = [r.metrics["ood"]["rmse"] for r in group]
        rows.append(
            {
                "source": source,
                "target": target,
                "model": model,
                "pearson_r": correlation(
                    transfer["init_from"]["task_config"], transfer["task_config"]
                ),
                "seeds_finetuned": len(tuned_rmse),
                "seeds_scratch": len(baseline),
                "ood_rmse_finetuned": float(np.mean(tuned_rmse)),
                "ood_rmse_scratch": float(np.mean(baseline)),
                "normalised_ood_rmse": float(np.mean(tuned_rmse) / np.mean(baseline)),
                "frozen_values": transfer.get("frozen_values"),
                "loaded_tensors": transfer["init_from"]["loaded"],
            }
        )
    return pd.DataFrame(rows)


def data_correlation(data_dir: Path) -> Correlation:
    """Pearson r of two tasks' property values over the molecules both have (by mol id:
    two properties of one data set), from the validated data in `data_dir`."""

    @cache
    def values(config: str) -> pd.Series:
        # read from runs' metrics.json: data, rebuilt from this installation's configs
        stored = {"task": OmegaConf.to_container(OmegaConf.create(config))}
        task = rebuild(stored, "a fine-tuned run's transfer record", ("task",), "data").task
        data = load_task(instantiate(task), data_dir, progress=False)
        return pd.Series(data.y, index=data.table.mol_id)

    def correlation(source: dict, target: dict) -> float:
        a = values(OmegaConf.to_yaml(source))
        b = values(OmegaConf.to_yaml(target))
        common = a.index.intersection(b.index)
        if len(common) < 3:
            raise InputError(
                f"{source['name']} and {target['name']} share {len(common)} molecules: "
                "no correlation over a common data set"
            )
        return float(np.corrcoef(a[common], b[common])[0, 1])

    return correlation


def transfer_figure(table: pd.DataFrame) -> Figure:
    """Normalised OOD RMSE of every ordered pair against the properties' correlation."""
    figure = new_figure()
    ax = figure.add_subplot()
    for model, group in table.groupby("model", sort=True):
        ax.scatter(group["pearson_r"], group["normalised_ood_rmse"], label=model, s=18)
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("Pearson r of pretraining and target property")
    ax.set_ylabel("OOD RMSE fine-tuned / un-pretrained")
    ax.legend(fontsize=7)
    return figure
