"""A tiny runs folder for the analysis notebook and its figures: two models × two tasks ×
two seeds, each with a metrics.json (as tests/e2e/test_report.py's) and a predictions.csv."""

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
        "id": {
            "n": 3,
            "rmse": 0.1 + seed / 100,
            "mae": 0.1,
            "r2": id_r2(model, task, seed),
            "pearson_r2": id_r2(model, task, seed),
        },
        "ood": {
            "n": 2,
            "rmse": 0.3 + seed / 100,
            "mae": 0.3,
            "r2": 0.2,
            "binned_r2": ood_binned_r2(model, task, seed),
            "binned_pearson_r2": ood_binned_r2(model, task, seed),
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


# ----------------------------------------------------- a fuller folder for the web site

SITE_MODELS = ("rf", "mlp", "chemprop", "egnn")
SITE_TASKS = ("csd10k_density", "lipophilicity")
SITE_SEEDS = (0, 1, 2)
SITE_SIZES = {"id": 12, "ood": 8, "val": 4}


def _site_metrics(model: str, task: str, seed: int) -> dict:
    """Scores that differ by model, task and seed (none constant), a full run each."""
    m, t = SITE_MODELS.index(model), SITE_TASKS.index(task)
    return {
        "task": task,
        "split": "ood",
        "model": model,
        "seed": seed,
        "split_hash": f"{task}-hash",
        "config_key": f"{model}-key",
        "uq": {"method": "native" if model == "rf" else "none"},
        "id": {
            "n": 12,
            "rmse": 0.1 + 0.03 * m + 0.01 * seed + 0.2 * t,
            "mae": 0.1,
            "r2": 0.95 - 0.05 * m - 0.01 * seed - 0.02 * t,
            "pearson_r2": 0.95 - 0.05 * m - 0.01 * seed - 0.02 * t,
        },
        "ood": {
            "n": 8,
            "rmse": 0.5 - 0.07 * m + 0.02 * seed + 0.6 * t,
            "mae": 0.3,
            "r2": 0.2,
            "binned_r2": 0.05 + 0.12 * m - 0.03 * seed - 0.1 * t + 0.01 * (m * seed % 3),
            "binned_pearson_r2": 0.05 + 0.12 * m - 0.03 * seed - 0.1 * t + 0.01 * (m * seed % 3),
        },
    }


def _site_predictions(model: str, task: str, seed: int, sigma: bool) -> pd.DataFrame:
    """A smooth truth with model-specific, seed-varying errors; σ for the forest."""
    m, t = SITE_MODELS.index(model), SITE_TASKS.index(task)
    rows = []
    for set_name, size in SITE_SIZES.items():
        for k in range(size):
            y_true = 1.0 + 0.3 * k + (4.0 if set_name == "ood" else 0.0) + t
            error = 0.15 * (m + 1) * ((k * (m + 2) + seed) % 5 - 2) / 2
            row = {
                "mol_id": len(rows),
                "smiles": "C" * (len(rows) + 1),
                "set": set_name,
                "y_true": y_true,
                "y_pred": y_true + error,
            }
            if sigma:
                row["y_std"] = 0.1 + 0.05 * (k % 4)
            rows.append(row)
    return pd.DataFrame(rows)


def _write_run(folder: Path, record: dict, predictions: pd.DataFrame) -> None:
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps(record))
    predictions.to_csv(folder / "predictions.csv", index=False)


def write_site_runs(root: Path) -> Path:
    """Four models of three representation groups × two tasks × three seeds (the
    forest with σ), plus a subset run of the MLP and a partial external prediction."""
    for model in SITE_MODELS:
        for task in SITE_TASKS:
            for seed in SITE_SEEDS:
                _write_run(
                    root / task / "ood" / model / f"{model}-key" / str(seed),
                    _site_metrics(model, task, seed),
                    _site_predictions(model, task, seed, sigma=model == "rf"),
                )
    subset = _site_metrics("mlp", "csd10k_density", 0) | {
        "config_key": "mlp-small",
        "flags": ["subset"],
    }
    _write_run(
        root / "csd10k_density" / "ood" / "mlp" / "mlp-small" / "0",
        subset,
        _site_predictions("mlp", "csd10k_density", 0, sigma=False).iloc[::2],
    )
    external = _site_metrics("egnn", "csd10k_density", 1) | {
        "model": "llm",
        "seed": None,
        "config_key": None,
        "flags": ["external", "partial"],
    }
    predictions = _site_predictions("egnn", "csd10k_density", 1, sigma=False)
    _write_run(root / "external" / "llm", external, predictions.iloc[3:])
    return root
