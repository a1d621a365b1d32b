"""The check report of a geometry as one figure: how many molecules pass and why the others
fail, then, where the optimiser recorded them, how far each molecule moved (heavy-atom
RMSD from its start geometry), how much its energy fell and what the optimiser spent on
it (CPU seconds). Counts are what a table gives; the figure shows the tails a median
hides."""

from __future__ import annotations

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from oodmol.data.geometry_checks import GeometryReport

SHOWN_QUANTILE = 0.995  # histograms span the molecules up to it; the rest are counted
REASON_CHARS = 38


def draw_check_report(report: GeometryReport, dataset: str) -> Figure:
    """One panel of counts, and with the optimiser's record histograms beside it."""
    changes = np.array(list(report.changes.values()), dtype=np.float64).reshape(-1, 3)
    costs = np.array(list(report.costs.values()), dtype=np.float64).reshape(-1, 2)
    panels = 1 + 2 * bool(len(changes)) + bool(len(costs))
    figure = Figure(figsize=(4.6 * panels, 3.8), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, panels, squeeze=False)[0]
    _draw_counts(axes[0], report)
    if len(changes):
        _draw_histogram(axes[1], changes[:, 0], "heavy-atom RMSD from the start geometry (Å)")
        _draw_histogram(axes[2], -changes[:, 2], "energy lowered by the optimiser (kcal/mol)")
    if len(costs):
        _draw_histogram(axes[-1], costs[:, 1], "the optimiser's CPU seconds per molecule")
    figure.suptitle(f"{report.geometry} geometries of {dataset}: {report.n_molecules} molecules")
    return figure


def _draw_counts(ax: Axes, report: GeometryReport) -> None:
    """Passed and each failure reason as bars on a log axis (thousands beside a few)."""
    labels = ["passed"] + [_short(reason) for reason in report.reasons]
    counts = [report.n_passed, *report.reasons.values()]
    rows = np.arange(len(labels))
    colors = ["tab:green"] + ["tab:red"] * len(report.reasons)
    ax.barh(rows, counts, color=colors)
    ax.set_yticks(rows, labels)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlim(0.5, max(counts) * 8)
    for row, count in zip(rows, counts, strict=True):
        ax.text(max(count, 0.6) * 1.15, row, str(count), va="center", fontsize=8)
    ax.set_xlabel("molecules")
    ax.set_title("bond graph and valence checks", fontsize=10)


def _draw_histogram(ax: Axes, values: np.ndarray, label: str) -> None:
    """Values up to SHOWN_QUANTILE as a histogram, the median marked, the rest counted."""
    top = float(np.quantile(values, SHOWN_QUANTILE))
    shown = values[values <= top]
    ax.hist(shown, bins=60, color="tab:blue", alpha=0.8)
    median = float(np.median(values))
    ax.axvline(median, color="black", linestyle="--", linewidth=1, label=f"median {median:.3g}")
    beyond = len(values) - len(shown)
    title = f"{len(values)} molecules" + (f", {beyond} beyond {top:.3g}" if beyond else "")
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(label)
    ax.set_ylabel("molecules")
    ax.legend(fontsize=8)


def _short(reason: str) -> str:
    return reason if len(reason) <= REASON_CHARS else reason[: REASON_CHARS - 1] + "…"
