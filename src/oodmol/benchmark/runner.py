"""Any scikit-learn-compatible regressor on a task, in one call: fitted on the cached
features of the training set (imputed and scaled with training statistics only, as the
RF/MLP baselines read them), scored as train.py's runs are."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import clone

from oodmol.benchmark.benchmark_task import TEST_SETS, BenchmarkTask, load
from oodmol.benchmark.evaluation import evaluate
from oodmol.data.features import VectorFeatures


def run(
    estimator: Any,
    task: str | BenchmarkTask,
    split: str = "ood",
    features: str = "descriptors",
    seeds: tuple[int, ...] = (0, 1, 2),
    *,
    name: str | None = None,
    save_to: str | Path | None = None,
    **load_options: Any,
) -> list[dict[str, Any]]:
    """Fit a copy of `estimator` for each seed (as its `random_state`, where it has
    one) on `features` (descriptors, morgan) of the task's training set and return each
    run's metrics; `save_to` writes the runs for the leaderboard. An estimator whose
    `predict` takes `return_std` (Gaussian processes, Bayesian ridge) is scored with its
    σ, recalibrated on the validation set.

    Examples:
        >>> from sklearn.linear_model import Ridge
        >>> runs = run(Ridge(alpha=10.0), "csv", features="morgan", seeds=(0,), path=tiny_csv,
        ...            target_column="y", overrides=["task.ood_size=20"])
        >>> runs[0]["model"], runs[0]["seed"], runs[0]["ood"]["n"]
        ('Ridge', 0, 20)
    """
    b = task if isinstance(task, BenchmarkTask) else load(task, split, **load_options)
    x = _scaled_features(b, features)
    y = b.train["target"].to_numpy(float)
    with_std = "return_std" in inspect.signature(estimator.predict).parameters
    results = []
    for seed in seeds:
        model = clone(estimator)
        if "random_state" in model.get_params():
            model.set_params(random_state=seed)
        model.fit(x["train"], y)
        predicted = {s: _predict(model, x[s], with_std) for s in (*TEST_SETS, "val")}
        results.append(
            evaluate(
                b,
                {s: predicted[s][0] for s in TEST_SETS},
                sigma={s: predicted[s][1] for s in TEST_SETS} if with_std else None,
                val=predicted["val"][0],
                val_sigma=predicted["val"][1] if with_std else None,
                name=name or type(estimator).__name__,
                seed=seed,
                save_to=save_to,
            )
        )
    return results


def _scaled_features(b: BenchmarkTask, kind: str) -> dict[str, np.ndarray]:
    store = b._store(kind)
    vectors = VectorFeatures(standardize=True)
    vectors.fit(store, b.train["mol_id"].to_numpy())
    return {
        name: vectors.matrix(store, f["mol_id"].to_numpy(), name) for name, f in b.sets().items()
    }


def _predict(model: Any, x: np.ndarray, with_std: bool) -> tuple[np.ndarray, np.ndarray | None]:
    if with_std:
        mean, std = model.predict(x, return_std=True)
        return np.asarray(mean, float), np.asarray(std, float)
    return np.asarray(model.predict(x), float), None
