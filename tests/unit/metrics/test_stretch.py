"""The validation line's stretch (`oodmol.metrics.stretch`) against known answers."""

from __future__ import annotations

import numpy as np
import pytest

from oodmol.metrics.stretch import stretched_section, validation_line
from oodmol.predictions import SetPredictions


def predicted(name: str, y: np.ndarray, y_pred: np.ndarray) -> SetPredictions:
    ids = np.arange(len(y))
    return SetPredictions(name, ids, np.array(["C"] * len(y)), y, y_pred)


def shrunk_sets(noise: float = 0.0) -> dict[str, SetPredictions]:
    """A model that predicts 1 + 0.5 y (+ noise on the validation set): shrunk to half
    its spread, which the tails turn into an offset."""
    rng = np.random.default_rng(0)
    val, test_id = rng.uniform(-1, 1, 40), rng.uniform(-1, 1, 30)
    ood = np.concatenate([rng.uniform(-3, -1.5, 10), rng.uniform(1.5, 3, 10)])
    return {
        "id": predicted("id", test_id, 1 + 0.5 * test_id),
        "ood": predicted("ood", ood, 1 + 0.5 * ood),
        "val": predicted("val", val, 1 + 0.5 * val + noise * rng.standard_normal(40)),
    }


def test_the_stretch_undoes_a_shrinkage_exactly() -> None:
    sets = shrunk_sets()
    intercept, slope = validation_line(sets["val"])
    assert (intercept, slope) == (pytest.approx(-2.0), pytest.approx(2.0))
    section = stretched_section(sets, train_median=0.0, train_range=(-1.0, 1.0))
    assert section["validation_molecules"] == 40
    assert section["ood"]["rmse"] == pytest.approx(0.0, abs=1e-9)
    assert section["id"]["rmse"] == pytest.approx(0.0, abs=1e-9)
    offset = section["extrapolation"]["tail_offset"]
    assert offset["low"] == pytest.approx(0.0, abs=1e-9) and offset["n_low"] == 10


def test_the_line_is_the_validation_regression_of_predictions_on_truth_solved() -> None:
    """With noise the stretch is 1/d and −c/d of the least-squares line ŷ ≈ c + d·y over
    the validation molecules (not y on ŷ, which would shrink again)."""
    sets = shrunk_sets(noise=0.2)
    d, c = np.polyfit(sets["val"].y_true, sets["val"].y_pred, 1)
    intercept, slope = validation_line(sets["val"])
    assert (intercept, slope) == (pytest.approx(-c / d), pytest.approx(1 / d))
    section = stretched_section(sets, 0.0, None)
    by_hand = (sets["ood"].y_pred - c) / d - sets["ood"].y_true
    assert section["ood"]["rmse"] == pytest.approx(np.sqrt(np.mean(by_hand**2)))
    assert "tail_offset" not in section["extrapolation"]  # no training range given


def test_predictions_that_ignore_the_property_are_refused_and_no_validation_no_section() -> None:
    sets = shrunk_sets()
    flat = sets["val"]
    sets["val"] = predicted("val", flat.y_true, np.full(len(flat.y_true), 0.7))
    section = stretched_section(sets, 0.0, (-1.0, 1.0))
    assert "rise with the property" in section["refused"] and "ood" not in section
    falling = predicted("val", flat.y_true, -flat.y_pred)
    assert "refused" in stretched_section({**sets, "val": falling}, 0.0, None)
    assert stretched_section({k: sets[k] for k in ("id", "ood")}, 0.0, None) is None
