"""The report's figures: the numbers they draw (Fig. 8's ratios, calibration coverage)
and nothing cut off at the figure's edge."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from oodmol.report.boom_reference import PAPER_LABEL
from oodmol.report.figures.heatmaps import (
    MEAN_COLUMN,
    normalized_rmse_heatmap,
    r2_heatmaps,
    rmse_over_task_mean,
    similarity_heatmap,
)
from oodmol.report.figures.panels import calibration_panels, coverage_curve, id_ood_bars


def _comparison() -> pd.DataFrame:
    """OOD RMSE and R² of three models on two tasks; the paper knows egnn on task a."""
    rows = []
    values = {("egnn", "a"): 1.0, ("mlp", "a"): 2.0, ("mlp [subset]", "a"): 0.5}
    values |= {("egnn", "b"): 4.0, ("mlp", "b"): 2.0}
    for (model, benchmark), rmse in values.items():
        paper = 0.8 if (model, benchmark) == ("egnn", "a") else np.nan
        for metric, set_name, mean in (
            ("rmse", "OOD", rmse),
            ("r2", "ID", 0.9),
            ("r2", "OOD", 0.1 * rmse),
        ):
            rows.append(
                {
                    "benchmark": benchmark,
                    "model": model,
                    "metric": metric,
                    "set": set_name,
                    "mean": mean,
                    "std": 0.01,
                    "paper_mean": paper if metric == "rmse" else np.nan,
                }
            )
    return pd.DataFrame(rows)


def test_fig8_divides_by_the_mean_of_full_runs_and_keeps_paper_rows_beside() -> None:
    ratio = rmse_over_task_mean(_comparison())
    # task a: mean of egnn and mlp = 1.5 (the subset run is shown, not averaged)
    assert ratio.loc["egnn", "a"] == pytest.approx(1.0 / 1.5)
    assert ratio.loc["mlp [subset]", "a"] == pytest.approx(0.5 / 1.5)
    assert ratio.loc[f"egnn · {PAPER_LABEL}", "a"] == pytest.approx(0.8 / 1.5)
    assert ratio.loc["egnn", "b"] == pytest.approx(4.0 / 3.0)
    assert ratio.loc["egnn", MEAN_COLUMN] == pytest.approx((1.0 / 1.5 + 4.0 / 3.0) / 2)
    assert list(ratio.index) == [
        "egnn",
        f"egnn · {PAPER_LABEL}",
        "mlp",
        "mlp [subset]",
    ]


def test_coverage_curve_counts_errors_inside_each_gaussian_interval() -> None:
    errors = np.array([0.0, 0.5, -1.0, 2.0])
    sigma = np.ones(4)
    # 0 %: ±0σ holds the zero error only; 70 %: ±1.036σ holds three; 99.99 %: all four
    observed = coverage_curve(errors, sigma, np.array([0.0, 0.7, 0.9999]))
    np.testing.assert_allclose(observed, [0.25, 0.75, 1.0])


def _cut_off(fig: Figure) -> bool:
    """Whether anything drawn (titles, labels, ticks, colour bars) reaches past the
    figure's edge: the bounding box of what is drawn must lie within the figure."""
    fig.canvas.draw()
    drawn = fig.get_tightbbox(fig.canvas.get_renderer())  # in inches
    width, height = fig.get_size_inches()
    slack = 0.02
    return (
        drawn.x0 < -slack
        or drawn.y0 < -slack
        or drawn.x1 > width + slack
        or drawn.y1 > height + slack
    )


def test_no_figure_cuts_off_its_titles_or_labels() -> None:
    comparison = _comparison()
    summary = comparison.assign(n_seeds=3)
    similarity = pd.DataFrame(
        [[1.0, 0.5, 0.2], [0.5, 1.0, 0.1], [0.2, 0.1, 1.0]],
        index=["egnn", "mlp", "a model with a long name"],
        columns=["egnn", "mlp", "a model with a long name"],
    )
    predictions = pd.DataFrame(
        {
            "benchmark": "a",
            "model": "rf",
            "set": ["id", "ood"] * 5,
            "y_true": np.arange(10.0),
            "y_pred": np.arange(10.0) + 0.3,
            "y_std": 0.5,
        }
    )
    figures = {
        "fig2": r2_heatmaps(comparison),
        "fig8": normalized_rmse_heatmap(comparison),
        "fig3": id_ood_bars(summary),
        "similarity": similarity_heatmap(similarity, list(similarity.index), "Spearman ρ"),
        "calibration": calibration_panels(predictions, "model", "Calibration: a long title"),
    }
    for name, fig in figures.items():
        assert not _cut_off(fig), name
    crowded = Figure(figsize=(2, 2))  # no constrained layout: the check must see this
    FigureCanvasAgg(crowded)
    crowded.add_subplot().set_title("a title far too long for a figure two inches wide")
    assert _cut_off(crowded)
