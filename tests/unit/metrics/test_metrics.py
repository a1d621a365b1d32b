"""Known-answer tests for the regression metrics (values computed by hand in comments)."""

import math
import warnings

import numpy as np
import pytest

from oodmol.metrics.regression import (
    binned_r2,
    check_finite_predictions,
    pearson_r2,
    regression_metrics,
)


def test_regression_metrics_hand_example():
    # err = [0, -1, 1, -2] -> SSE = 6, MSE = 1.5, MAE = 4/4 = 1
    # mean(y) = 2.5, SS_tot = 2.25 + 0.25 + 0.25 + 2.25 = 5 -> R² = 1 - 6/5 = -0.2
    # ranks: y = [1,2,3,4], ŷ = [1,3,2,4], Σd² = 2 -> ρ = 1 - 6·2/(4·15) = 0.8
    m = regression_metrics([1, 2, 3, 4], [1, 3, 2, 6])
    assert m["n"] == 4
    assert m["rmse"] == pytest.approx(math.sqrt(1.5))
    assert m["mae"] == pytest.approx(1.0)
    assert m["r2"] == pytest.approx(-0.2)
    assert m["spearman"] == pytest.approx(0.8)
    # means 2.5 and 3; cov = 3 + 0 - 0.5 + 4.5 = 7; SS = 5 and 14 -> r² = 49 / 70
    assert m["pearson_r2"] == pytest.approx(0.7)


def test_pearson_r2_is_blind_to_bias_and_scale_as_boom_is():
    # ŷ = 2y + 10: a perfect correlation, a terrible fit (SSE = 121 + 144 + 169, SS_tot = 2)
    y = [1, 2, 3]
    biased = [12, 14, 16]
    assert pearson_r2(y, biased) == pytest.approx(1.0)
    assert regression_metrics(y, biased)["r2"] == pytest.approx(1 - 434 / 2)
    assert math.isnan(pearson_r2(y, [5, 5, 5]))  # constant prediction: undefined


def test_binned_r2_hand_example_with_median_value_in_high_tail():
    # split 3: low tail y = [1, 2]; high tail y = [4, 3, 5, 6] (3 == split goes high).
    # low:  ŷ = [1.5, 1.5], SSE = 0.5, mean 1.5, SS_tot = 0.5 -> R² = 0
    # high: ŷ = [4, 3, 6, 5], SSE = 2, mean 4.5, SS_tot = 5 -> R² = 0.6
    out = binned_r2([1, 2, 4, 3, 5, 6], [1.5, 1.5, 4, 3, 6, 5], split_value=3)
    assert (out["n_low"], out["n_high"]) == (2, 4)
    assert out["r2_low"] == pytest.approx(0.0)
    assert out["r2_high"] == pytest.approx(0.6)
    assert out["binned_r2"] == pytest.approx(0.3)
    # Pearson: the low tail's prediction is constant (undefined, left out); high tail:
    # means 4.5 and 4.5, cov = 0.25 + 2.25 + 0.75 + 0.75 = 4, SS = 5 and 5 -> r² = 0.64
    assert out["binned_pearson_r2"] == pytest.approx(0.64)


def test_binned_r2_excludes_single_molecule_tail():
    # low tail = [1] alone -> undefined, left out of the mean (its awful ŷ = 10 is ignored)
    # high: y = [4, 5, 6], ŷ = [4, 5, 7], SSE = 1, mean 5, SS_tot = 2 -> R² = 0.5
    out = binned_r2([1, 4, 5, 6], [10, 4, 5, 7], split_value=3)
    assert (out["n_low"], out["n_high"]) == (1, 3)
    assert math.isnan(out["r2_low"])
    assert out["r2_high"] == pytest.approx(0.5)
    assert out["binned_r2"] == pytest.approx(0.5)


def test_binned_r2_nan_when_no_tail_is_defined():
    out = binned_r2([1, 5], [1, 5], split_value=3)
    assert math.isnan(out["binned_r2"])
    assert (out["n_low"], out["n_high"]) == (1, 1)


def test_undefined_metrics_are_nan_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        one = regression_metrics([2.0], [3.0])
        empty = regression_metrics([], [])
        constant = regression_metrics([1, 1, 1], [1, 2, 3])
    assert one["n"] == 1 and one["rmse"] == pytest.approx(1.0) and one["mae"] == pytest.approx(1.0)
    assert math.isnan(one["r2"]) and math.isnan(one["spearman"])
    assert empty["n"] == 0 and all(math.isnan(empty[k]) for k in ("rmse", "mae", "r2", "spearman"))
    assert math.isnan(constant["r2"]) and math.isnan(constant["spearman"])
    assert constant["rmse"] == pytest.approx(math.sqrt(5 / 3))


def test_length_mismatch_raises():
    with pytest.raises(ValueError, match="3 values"):
        regression_metrics([1, 2, 3], [1, 2])


def test_check_finite_predictions_names_the_bad_molecule():
    check_finite_predictions([1.0, 2.0], ["CCO", "CC"])
    with pytest.raises(ValueError, match=r"1 of 3 .*c1ccccc1") as info:
        check_finite_predictions([1.0, np.nan, 2.0], ["CCO", "c1ccccc1", "CC(=O)O"])
    assert "CCO" not in str(info.value)
    with pytest.raises(ValueError, match="mol-inf"):
        check_finite_predictions([np.inf, 0.0], ["mol-inf", "mol-ok"])


def test_check_finite_predictions_caps_the_list():
    names = [f"m{i}" for i in range(12)]
    with pytest.raises(ValueError, match=r"12 of 12 .*m9, \.\.\. \(2 more\)") as info:
        check_finite_predictions([np.nan] * 12, names)
    assert "m10" not in str(info.value)
