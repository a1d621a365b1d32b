"""How far a campaign has got, from the labels it has revealed: the best value found, and
the recall of the pool's top molecules (those it set out to find)."""

from __future__ import annotations

import math

import numpy as np

from oodmol.campaign.acquisition import Objective


def top_molecules(
    mol_id: np.ndarray, y: np.ndarray, objective: Objective, fraction: float
) -> np.ndarray:
    """The mol ids of the pool's best `fraction` by the objective: ceil(fraction · n), at
    least one; molecules of equal value are taken smaller mol_id first."""
    if not 0 < fraction <= 1:
        raise ValueError(f"top_fraction must lie in (0, 1], got {fraction}")
    count = max(1, math.ceil(fraction * len(mol_id) - 1e-9))
    order = np.lexsort((np.asarray(mol_id), -objective.utility(y)))
    return np.sort(np.asarray(mol_id)[order[:count]])


def best_value(y: np.ndarray, objective: Objective) -> float | None:
    """The best of some property values by the objective (None for none)."""
    y = np.asarray(y, dtype=float)
    return float(y[np.argmax(objective.utility(y))]) if len(y) else None


def progress(
    acquired_id: np.ndarray,
    acquired_y: np.ndarray,
    top: np.ndarray,
    start_best: float,
    objective: Objective,
) -> dict:
    """After an acquisition: how many molecules were acquired, the best value among them
    (`best_found`) and among every labelled molecule (`best_known`: the starting labels
    too), and the recall of `top`."""
    found = best_value(acquired_y, objective)
    known = start_best if found is None else best_value([start_best, found], objective)
    hits = int(np.isin(top, acquired_id).sum())
    return {
        "n_acquired": len(acquired_id),
        "best_found": found,
        "best_known": known,
        "n_top_found": hits,
        "n_top": len(top),
        "recall": hits / len(top),
    }
