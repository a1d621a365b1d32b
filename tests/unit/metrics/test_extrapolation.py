"""The extrapolation section of metrics.json against hand computations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from oodmol.metrics.extrapolation import discovery, extrapolation_metrics, tail_offset


def test_tail_offset_is_the_mean_signed_error_beyond_the_training_range() -> None:
    y = np.array([-3.0, -1.0, 0.5, 4.0, 6.0])
    pred = np.array([-2.0, -1.5, 0.5, 3.0, 3.0])
    # below -0.5: molecules 0 (+1) and 1 (-0.5); above 2: molecules 3 (-1) and 4 (-3)
    assert tail_offset(y, pred, -0.5, 2.0) == {"low": 0.25, "high": -2.0, "n_low": 2, "n_high": 2}
    empty = tail_offset(y, pred, -10, 10)
    assert math.isnan(empty["low"]) and empty["n_low"] == empty["n_high"] == 0


def test_discovery_counts_the_true_tail_molecules_ranked_first() -> None:
    id_pred = np.array([0.0, 1.0, 9.0])  # an ID molecule predicted highest of all
    ood_true = np.array([10.0, 8.0, -5.0, -4.0])  # two in each tail of median 1
    ood_pred = np.array([7.0, 2.0, -1.0, 5.0])
    # high: top 2 predictions are 9.0 (ID) and 7.0 (OOD, y=10): 1 of 2
    # low: bottom 2 predictions are -1.0 (OOD, y=-5) and 0.0 (ID): 1 of 2
    found = discovery(id_pred, ood_true, ood_pred, median=1.0)
    assert found == {"high": {"k": 2, "precision": 0.5}, "low": {"k": 2, "precision": 0.5}}
    perfect = discovery(np.zeros(3), ood_true, ood_true, median=1.0)
    assert perfect["high"]["precision"] == perfect["low"]["precision"] == 1.0


def test_the_section_holds_the_rmse_ratio() -> None:
    section = extrapolation_metrics(
        np.zeros(4), np.full(4, 0.5), np.array([3.0, -3.0]), np.array([1.0, -1.0]), 0.0, (-1, 1)
    )
    assert section["ood_id_rmse_ratio"] == pytest.approx(2.0 / 0.5)
    assert section["tail_offset"] == {"low": 2.0, "high": -2.0, "n_low": 1, "n_high": 1}
