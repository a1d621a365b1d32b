"""The analysis notebook's figures (oodmol.report.notebook) show the runs' own numbers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from report_helpers import MODELS, SEEDS, SET_SIZES, TASKS, id_r2, ood_binned_r2, write_runs

from oodmol.report.collect import collect_runs
from oodmol.report.notebook import id_vs_ood_scatter, parity_grid, read_predictions
from oodmol.report.tables import label_benchmarks, summarize


@pytest.fixture
def runs(tmp_path: Path) -> pd.DataFrame:
    labelled, _ = label_benchmarks(collect_runs(write_runs(tmp_path / "runs")).runs)
    return labelled


def test_predictions_are_the_test_rows_of_every_run(runs: pd.DataFrame) -> None:
    predictions = read_predictions(runs)
    per_run = SET_SIZES["id"] + SET_SIZES["ood"]
    assert len(predictions) == len(MODELS) * len(TASKS) * len(SEEDS) * per_run
    assert set(predictions["set"]) == {"id", "ood"}
    one = predictions[(predictions["model"] == "rf") & (predictions["seed"] == 1)]
    assert sorted(one["benchmark"].unique()) == sorted(TASKS)


def test_a_run_without_predictions_is_named_and_left_out(runs: pd.DataFrame) -> None:
    missing = Path(runs["path"].iloc[0]).with_name("predictions.csv")
    missing.unlink()
    with pytest.warns(UserWarning, match=f"{missing} is missing"):
        predictions = read_predictions(runs)
    assert len(predictions) == (len(runs) - 1) * (SET_SIZES["id"] + SET_SIZES["ood"])


def test_parity_grid_has_a_panel_per_task_and_model_with_both_test_sets(
    runs: pd.DataFrame,
) -> None:
    predictions = read_predictions(runs)
    fig = parity_grid(predictions)
    axes = np.array(fig.axes).reshape(len(TASKS), len(MODELS))
    assert [ax.get_title() for ax in axes[0]] == sorted(MODELS)
    for row, task in enumerate(sorted(TASKS)):
        assert axes[row, 0].get_ylabel().startswith(task)
        for column, model in enumerate(sorted(MODELS)):
            id_points, ood_points = (c.get_offsets() for c in axes[row, column].collections)
            assert len(id_points) == SET_SIZES["id"] * len(SEEDS)
            assert len(ood_points) == SET_SIZES["ood"] * len(SEEDS)
            expected = predictions[
                (predictions["benchmark"] == task)
                & (predictions["model"] == model)
                & (predictions["set"] == "ood")
            ][["y_true", "y_pred"]]
            np.testing.assert_allclose(ood_points, expected.to_numpy())
        # one task, one scale: every model's panel shares the row's limits
        assert len({ax.get_xlim() for ax in axes[row]}) == 1


def test_id_vs_ood_scatter_puts_each_model_and_task_at_its_seed_means(
    runs: pd.DataFrame,
) -> None:
    fig = id_vs_ood_scatter(summarize(runs))
    ax = fig.axes[0]
    points = sorted(tuple(c.get_offsets()[0]) for c in ax.collections)
    expected = sorted(
        (
            np.mean([id_r2(model, task, seed) for seed in SEEDS]),
            np.mean([ood_binned_r2(model, task, seed) for seed in SEEDS]),
        )
        for model in MODELS
        for task in TASKS
    )
    np.testing.assert_allclose(points, expected)
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert legend == [*sorted(MODELS), *sorted(TASKS)]
