"""BOOM's other figures: ID against OOD bars per task (Fig. 3), the Gaussian-process fit
of OOD on ID score (Fig. 11), parity grids (Appendix D) and calibration curves."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from scipy.stats import norm

from oodmol.plotting import SET_COLORS, SET_LABELS
from oodmol.report.notebook import draw_parity
from oodmol.report.significance import GaussianProcessFit
from oodmol.report.tables import flags

PER_ROW = 3


def _panels(count: int, width: float, height: float) -> tuple[Figure, np.ndarray]:
    """A figure of `count` panels, at most PER_ROW to a row; unused panels hidden."""
    columns = min(max(count, 1), PER_ROW)
    rows = max(math.ceil(count / columns), 1)
    fig = Figure(figsize=(0.6 + width * columns, 0.6 + height * rows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, columns, squeeze=False).ravel()
    for ax in axes[count:]:
        ax.set_visible(False)
    return fig, axes


def id_ood_bars(summary: pd.DataFrame) -> Figure:
    """BOOM Fig. 3: per task, each model's seed-mean ID R² and OOD binned R² side by side
    (error bars: sd over seeds), dashed lines at the averages over the full-run models."""
    r2 = summary[summary["metric"] == "r2"]
    benchmarks = sorted(r2["benchmark"].unique())
    models = sorted(r2["model"].unique())
    fig, axes = _panels(len(benchmarks), max(3.2, 0.55 * len(models) + 1.2), 3.2)
    for ax, benchmark in zip(axes, benchmarks, strict=False):
        cells = r2[r2["benchmark"] == benchmark]
        x = np.arange(len(models))
        for offset, test_set in ((-0.2, "id"), (0.2, "ood")):
            set_name = SET_LABELS[test_set]
            part = cells[cells["set"] == set_name].set_index("model").reindex(models)
            label = "ID R²" if test_set == "id" else "OOD binned R²"
            ax.bar(
                x + offset,
                part["mean"],
                0.4,
                yerr=part["std"].fillna(0.0),
                color=SET_COLORS[test_set],
                label=label,
                capsize=2,
            )
            full = part.loc[[m for m in models if not flags(m)], "mean"]
            if full.notna().any():
                ax.axhline(full.mean(), color=SET_COLORS[test_set], linestyle="--", linewidth=1)
        ax.axhline(0.0, color="black", linewidth=0.6)
        ax.set_xticks(x, models, rotation=45, ha="right", fontsize=8)
        ax.set_title(benchmark, fontsize=10)
    axes[0].set_ylabel("score (dashed: mean over models)")
    axes[0].legend(fontsize=8)
    return fig


def id_ood_fit(points: pd.DataFrame, fit: GaussianProcessFit | None) -> Figure:
    """BOOM Fig. 11: seed-mean OOD binned R² against ID R², one point per model and
    task, with the Gaussian-process mean and its 95 % predictive band."""
    fig = Figure(figsize=(6.8, 4.6), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    if fit is not None:
        ax.fill_between(
            fit.grid,
            fit.mean - 1.96 * fit.std,
            fit.mean + 1.96 * fit.std,
            color="grey",
            alpha=0.25,
            label="GP 95 % band",
        )
        ax.plot(fit.grid, fit.mean, color="black", linewidth=1.2, label="GP mean")
    for i, (benchmark, part) in enumerate(points.groupby("benchmark", sort=True)):
        ax.scatter(part["id"], part["ood"], color=f"C{i % 10}", label=benchmark, s=24)
    ax.set_xlabel("ID R²")
    ax.set_ylabel("OOD binned R²")
    ax.set_title("OOD against ID score (one point per model and task)", fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1))
    return fig


def parity_panels(predictions: pd.DataFrame, by: str, title: str) -> Figure:
    """Appendix D: predicted against true, one panel per value of `by` (a model's tasks,
    or a task's models), ID and OOD in their colours, every seed pooled; the diagonal is
    a perfect prediction."""
    benchmarks = sorted(predictions[by].unique())
    fig, axes = _panels(len(benchmarks), 3.0, 3.0)
    for ax, benchmark in zip(axes, benchmarks, strict=False):
        panel = predictions[predictions[by] == benchmark]
        low = min(panel["y_true"].min(), panel["y_pred"].min())
        high = max(panel["y_true"].max(), panel["y_pred"].max())
        draw_parity(ax, panel, low, high)
        ax.set(
            xlim=(low, high), ylim=(low, high), aspect="equal", xlabel="true", ylabel="predicted"
        )
        ax.set_title(benchmark, fontsize=10)
    axes[0].legend(fontsize=8, markerscale=2)
    fig.suptitle(title, fontsize=11)
    return fig


def coverage_curve(errors: np.ndarray, sigma: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """Observed share of |error| within the central Gaussian interval of each level."""
    z = norm.ppf((1.0 + levels) / 2.0)
    return (np.abs(errors)[None, :] <= z[:, None] * sigma[None, :]).mean(axis=1)


def calibration_panels(predictions: pd.DataFrame, by: str, title: str) -> Figure:
    """Observed against expected coverage of the Gaussian intervals from σ, one panel
    per value of `by`, ID and OOD; on the diagonal σ is calibrated, below it too small."""
    with_sigma = predictions[predictions["y_std"].notna()]
    benchmarks = sorted(with_sigma[by].unique())
    levels = np.linspace(0.0, 1.0, 21)
    fig, axes = _panels(len(benchmarks), 3.0, 3.0)
    for ax, benchmark in zip(axes, benchmarks, strict=False):
        panel = with_sigma[with_sigma[by] == benchmark]
        ax.plot([0, 1], [0, 1], color="black", linewidth=0.8)
        for set_name, colour in SET_COLORS.items():
            part = panel[panel["set"] == set_name]
            if part.empty:
                continue
            observed = coverage_curve(
                (part["y_pred"] - part["y_true"]).to_numpy(), part["y_std"].to_numpy(), levels
            )
            ax.plot(
                levels, observed, color=colour, marker="o", markersize=2, label=set_name.upper()
            )
        ax.set(
            xlim=(0, 1),
            ylim=(0, 1),
            aspect="equal",
            xlabel="expected coverage",
            ylabel="observed coverage",
        )
        ax.set_title(benchmark, fontsize=10)
    axes[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=11)
    return fig
