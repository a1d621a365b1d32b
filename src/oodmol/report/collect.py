"""Read every run's ``metrics.json`` below a folder into one flat table.

A leaderboard built from hundreds of runs must not die on one half-written file, nor
quietly drop it: bad files, and runs that did not end with test metrics (failed runs,
search trials), are skipped and returned with the reason, for the caller to show.

Like is compared with like: a run's leaderboard label carries its comparability flags
(`oodmol.comparability`: "mlp [subset]", "llm [external, partial]"), and the
configuration key where one model was run with several configurations, so that such a
run stands beside the full runs of its model and never replaces one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from oodmol.errors import InputError
from oodmol.lines import DEFAULT_LINE
from oodmol.metrics.regression import binned_r2, pearson_r2
from oodmol.predictions import PREDICTIONS_FILE, read_predictions_file
from oodmol.run_record import REQUIRED_METRICS, iter_runs

# Identity of a run; two files with the same identity are the same run recorded twice.
# "model" is the leaderboard label, which names the uq method and the flags (see
# `model_label`); external predictions may have no configuration key and no seed.
RUN_KEY = ("task", "split", "split_hash", "model", "config_key", "seed")
# Methods that are the model itself: no uq method, or the model's own σ (forest spread).
PLAIN_METHODS = ("none", "native")
# BOOM's R² (squared Pearson): recorded since it was found to be BOOM's; older runs get it
# from their predictions.csv
BOOM_R2 = {"id.pearson_r2": "id", "ood.binned_pearson_r2": "ood"}


@dataclass
class Collection:
    """Valid runs (one flat row each, nested keys joined with '.') and skipped files."""

    runs: pd.DataFrame
    skipped: list[tuple[Path, str]] = field(default_factory=list)


def model_label(record: dict[str, Any]) -> str:
    """The model's name with its Δ-learning baseline ("rf Δphysics"; "mean Δphysics" is
    the baseline alone) and that baseline's fit where not least squares ("rf Δphysics
    (fit=calibration)"), its uq method ("mlp+ensemble"), its training weights and
    protocol where not the default ("mlp (weighting=tails)", "mlp (protocol=boom)") and
    its flags ("mlp [subset, shortened]"), so that
    each is a leaderboard column of its own."""
    uq = record.get("uq")
    method = uq.get("method", "none") if isinstance(uq, dict) else "none"
    label = record["model"] if method in PLAIN_METHODS else f"{record['model']}+{method}"
    data = record.get("data")
    baseline = data.get("baseline") if isinstance(data, dict) else None
    if isinstance(baseline, dict) and baseline.get("name"):
        label += f" Δ{baseline['name']}"
        if baseline.get("fit", DEFAULT_LINE) != DEFAULT_LINE:
            label += f" (fit={baseline['fit']})"
    weighting = data.get("weighting") if isinstance(data, dict) else None
    if isinstance(weighting, dict) and weighting.get("name"):
        label += f" (weighting={weighting['name']})"
    training = record.get("training")
    protocol = training.get("protocol", "default") if isinstance(training, dict) else "default"
    if protocol != "default":
        label += f" (protocol={protocol})"
    flags = record.get("flags") or []
    return f"{label} [{', '.join(flags)}]" if flags else label


def collect_runs(runs_dir: str | Path) -> Collection:
    """Load every ``metrics.json`` below ``runs_dir`` (recursively, in sorted path order).

    Invalid files and repeats of an already-seen run (same task, split, split_hash,
    model and seed, e.g. a re-run into a second folder) are skipped with a reason, so
    that no seed is counted twice; of such repeats the first path in sorted order is
    kept. Null metric values become NaN. Ensemble members' files are not runs and are
    passed over; `model` becomes the leaderboard label (`model_label`, with the
    configuration key appended where one label has several), the model's own name stays
    in `model_name`.
    """
    records: list[dict[str, Any]] = []
    skipped: list[tuple[Path, str]] = []
    seen: dict[tuple, Path] = {}
    for run in iter_runs(runs_dir, skipped=skipped):
        path = run.path
        if not run.tested:
            skipped.append((path, "a search trial: validated, never tested"))
            continue
        record = run.to_json()
        record = {**record, "model_name": record["model"], "model": model_label(record)}
        key = tuple(record.get(k) for k in RUN_KEY)
        if key in seen:
            skipped.append((path, f"duplicate of run {seen[key]}"))
            continue
        seen[key] = path
        records.append({**record, "path": str(path)})
    if not records:
        return Collection(runs=pd.DataFrame(), skipped=skipped)
    runs = _label_configurations(pd.json_normalize(records, sep="."))
    for section, names in REQUIRED_METRICS.items():
        for name in names:
            runs[f"{section}.{name}"] = runs[f"{section}.{name}"].astype(float)
    return Collection(runs=_with_boom_r2(runs), skipped=skipped)


def _with_boom_r2(runs: pd.DataFrame) -> pd.DataFrame:
    """BOOM's R² for every run: as recorded, else from the predictions.csv beside its
    metrics.json and the training median it recorded, else NaN."""
    for column in BOOM_R2:
        runs[column] = runs[column].astype(float) if column in runs else np.nan
    lacking = runs[list(BOOM_R2)].isna().any(axis=1)
    for index in runs.index[lacking]:
        folder = Path(runs.at[index, "path"]).parent
        median = runs.at[index, "train_median"] if "train_median" in runs else np.nan
        if not (folder / PREDICTIONS_FILE).is_file() or not np.isfinite(median):
            continue
        try:
            predictions = read_predictions_file(folder)
        except InputError:  # the run's record stands; BOOM's R² stays unknown
            continue
        test_id = predictions[predictions["set"] == "id"]
        ood = predictions[predictions["set"] == "ood"]
        runs.at[index, "id.pearson_r2"] = pearson_r2(test_id["y_true"], test_id["y_pred"])
        tails = binned_r2(ood["y_true"], ood["y_pred"], float(median))
        runs.at[index, "ood.binned_pearson_r2"] = tails["binned_pearson_r2"]
    return runs


def _label_configurations(runs: pd.DataFrame) -> pd.DataFrame:
    """Append " @<key>" to the label of every run whose model was run with more than one
    configuration on the same benchmark, so that they are never averaged together."""
    if "config_key" not in runs:
        return runs
    runs = runs.copy()
    group = ["task", "split", "split_hash", "model"]
    keys = runs.groupby(group, dropna=False)["config_key"].transform("nunique")
    several = (keys > 1) & runs["config_key"].notna()
    runs.loc[several, "model"] = runs["model"][several] + " @" + runs["config_key"][several]
    return runs
