"""A tiny runs folder for the analysis notebook and its figures: two models × two tasks ×
two seeds, each with a metrics.json (as tests/test_report.py's) and a predictions.csv."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

MODELS = ("mlp", "rf")
TASKS = ("csd10k_density", "lipophilicity")
SEEDS = (0, 1)
# rows of each run's predictions.csv per set; "val" rows are not test molecules
SET_SIZES = {"id": 3, "ood": 2, "val": 2}


def id_r2(model: str, task: str, seed: int) -> float:
    return 0.9 - 0.1 * MODELS.index(model) - 0.02 * seed


def ood_binned_r2(model: str, task: str, seed: int) -> float:
    return 0.5 - 0.3 * MODELS.index(model) + 0.1 * TASKS.index(task) - 0.04 * seed


def _metrics(model: str, task: str, seed: int) -> dict:
    return {
        "task": task,
        "split": "ood",
        "model": model,
        "seed": seed,
        "split_hash": f"{task}-hash",
        "config_key": f"{model}-key",
        "id": {"n": 3, "rmse": 0.1 + seed / 100, "mae": 0.1, "r2": id_r2(model, task, seed)},
        "ood": {
            "n": 2,
            "rmse": 0.3 + seed / 100,
            "mae": 0.3,
            "r2": 0.2,
            "binned_r2": ood_binned_r2(model, task, seed),
        },
    }


def _predictions(model: str, task: str, seed: int) -> pd.DataFrame:
    """y_pred = y_true + an error that differs by model, task, seed and set."""
    rows = []
    for set_name, size in SET_SIZES.items():
        for k in range(size):
            y_true = 1.0 + k + (5.0 if set_name == "ood" else 0.0) + TASKS.index(task)
            error = 0.1 * (MODELS.index(model) + 1) * (-1) ** (k + seed)
            rows.append(
                {
                    "mol_id": len(rows),
                    "smiles": "C" * (len(rows) + 1),
                    "set": set_name,
                    "y_true": y_true,
                    "y_pred": y_true + error,
                }
            )
    return pd.DataFrame(rows)


def write_runs(root: Path) -> Path:
    """Write the runs folder in the layout train.py uses; return it."""
    for model in MODELS:
        for task in TASKS:
            for seed in SEEDS:
                folder = root / task / "ood" / model / f"{model}-key" / str(seed)
                folder.mkdir(parents=True)
                (folder / "metrics.json").write_text(json.dumps(_metrics(model, task, seed)))
                _predictions(model, task, seed).to_csv(folder / "predictions.csv", index=False)
    return root
