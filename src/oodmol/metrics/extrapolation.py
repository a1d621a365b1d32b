"""How a model extrapolates, beside its RMSE: the section `extrapolation` of metrics.json.

- `ood_id_rmse_ratio`: the OOD set's RMSE over the ID set's (BOOM's headline: about 3
  for the best model of each task).
- `tail_offset`: the mean signed error ŷ − y of the OOD molecules beyond the training
  range, below its minimum (`low`) and above its maximum (`high`): a model that
  regresses to the training data's mean predicts too high in the low tail and too low
  in the high one.
- `discovery` (MatEx, Segal et al. 2025): screening the test molecules (ID and OOD) by
  prediction, of the k ranked first how many truly lie in the OOD set's tail, k being
  that tail's size, for the high tail (highest predictions, OOD molecules at or above the
  training median) and the low tail (lowest predictions, OOD molecules below it).
  With k the number of true tail molecules, precision and recall at k are one number.
"""

from __future__ import annotations

import math

import numpy as np


def extrapolation_metrics(
    id_true: np.ndarray,
    id_pred: np.ndarray,
    ood_true: np.ndarray,
    ood_pred: np.ndarray,
    train_median: float,
    train_range: tuple[float, float] | None,
) -> dict:
    """The section's measures (see the module); a measure without molecules is NaN."""
    id_rmse = _rmse(id_true, id_pred)
    ood_rmse = _rmse(ood_true, ood_pred)
    section: dict = {
        "ood_id_rmse_ratio": ood_rmse / id_rmse if id_rmse > 0 else math.nan,
        "discovery": discovery(id_pred, ood_true, ood_pred, train_median),
    }
    if train_range is not None:
        section["tail_offset"] = tail_offset(ood_true, ood_pred, *train_range)
    return section


def tail_offset(y_true: np.ndarray, y_pred: np.ndarray, low: float, high: float) -> dict:
    """Mean ŷ − y of the molecules below `low` and above `high`, and how many there are."""
    below, above = y_true < low, y_true > high
    return {
        "low": _mean(y_pred[below] - y_true[below]),
        "high": _mean(y_pred[above] - y_true[above]),
        "n_low": int(below.sum()),
        "n_high": int(above.sum()),
    }


def discovery(
    id_pred: np.ndarray, ood_true: np.ndarray, ood_pred: np.ndarray, median: float
) -> dict:
    """Precision (= recall) at k of screening the ID and OOD molecules for each tail."""
    predicted = np.concatenate([id_pred, ood_pred])
    in_ood = np.concatenate([np.zeros(len(id_pred), bool), np.ones(len(ood_pred), bool)])
    truth = np.concatenate([np.full(len(id_pred), np.nan), ood_true])
    section = {}
    for tail, sign in (("high", -1.0), ("low", 1.0)):
        positive = in_ood & (truth >= median if tail == "high" else truth < median)
        k = int(positive.sum())
        if k == 0:
            section[tail] = {"k": 0, "precision": math.nan}
            continue
        ranked = np.argsort(sign * predicted, kind="stable")[:k]
        section[tail] = {"k": k, "precision": float(positive[ranked].sum() / k)}
    return section


def _rmse(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    return float(np.sqrt(np.mean((y_pred - y_true) ** 2))) if len(y_true) else math.nan


def _mean(values: np.ndarray) -> float:
    return float(values.mean()) if len(values) else math.nan
