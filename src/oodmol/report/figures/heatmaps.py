"""Model × task heatmaps: OOD RMSE relative to the best model, BOOM's Fig. 2 (ID R² and
OOD binned R²) and Fig. 8 (OOD RMSE over the task's mean), and the clustered matrix of
model-model similarity.

Where the paper has a number for a model, a row "<model> · BOOM (paper)" follows the
model's own row, so that the two read side by side on one colour scale.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import LogNorm, Normalize
from matplotlib.figure import Figure

from oodmol.report.boom_reference import PAPER_LABEL
from oodmol.report.tables import flags

MEAN_COLUMN = "mean over tasks"


def _figure(n_rows: int, n_columns: int, panels: int = 1) -> Figure:
    width = max(6.0, 2.4 + panels * (0.9 * n_columns + 0.6))
    fig = Figure(figsize=(width, 2.0 + 0.42 * n_rows), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _draw(ax, values: pd.DataFrame, norm: Normalize, cmap: str, fmt: str) -> object:
    """One annotated heatmap of a rows × columns frame; NaN cells stay blank, numbers are
    white on dark cells and black on light ones, and paper rows get italic labels."""
    data = values.to_numpy(dtype=float)
    image = ax.imshow(np.ma.masked_invalid(data), cmap=cmap, norm=norm, aspect="auto")
    for (i, j), value in np.ndenumerate(data):
        if np.isfinite(value):
            red, green, blue, _ = image.cmap(norm(np.clip(value, norm.vmin, norm.vmax)))
            dark = 0.299 * red + 0.587 * green + 0.114 * blue < 0.5  # the cell's luminance
            ax.text(
                j,
                i,
                format(value, fmt),
                ha="center",
                va="center",
                fontsize=7,
                color="white" if dark else "black",
            )
    ax.set_xticks(range(data.shape[1]), values.columns, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(data.shape[0]), values.index, fontsize=8)
    for label in ax.get_yticklabels():
        if label.get_text().endswith(PAPER_LABEL):
            label.set_fontstyle("italic")
    return image


def normalized_ood_rmse(summary: pd.DataFrame) -> pd.DataFrame:
    """Seed-mean OOD RMSE divided by the best (lowest) model's on the same task.

    Rows are models, columns benchmarks; 1.00 marks the best model of a task and 1.50
    an error 50% above it. NaN where a model has no finite OOD RMSE for a task.
    """
    rows = summary[(summary["metric"] == "rmse") & (summary["set"] == "OOD")]
    rmse = rows.pivot(index="model", columns="benchmark", values="mean")
    return rmse / rmse.min(axis=0)


def ood_heatmap(summary: pd.DataFrame) -> Figure:
    """Heatmap of OOD RMSE relative to the best model per task.

    Why this quantity rather than OOD binned R²: RMSE is defined for every run, while
    binned R² is NaN whenever an OOD tail has fewer than two molecules and can be
    arbitrarily negative, which would let one bad cell stretch the colour scale.
    Raw RMSE is in each property's own units and cannot share one colour scale, so it
    is divided by the task's best OOD RMSE: the ratio is unitless, and reads directly
    as "how many times the best model's OOD error". Lower (darker) is better; cells
    are annotated with the ratio, blank cells mean no run.
    """
    ratio = normalized_ood_rmse(summary)
    finite = ratio.to_numpy(dtype=float)
    finite = finite[np.isfinite(finite)]
    norm = Normalize(vmin=1.0, vmax=max(float(finite.max()) if finite.size else 1.0, 1.01))
    fig = _figure(*ratio.shape)
    ax = fig.add_subplot()
    image = _draw(ax, ratio, norm, "viridis", ".2f")
    ax.set_title("OOD RMSE ÷ best model's OOD RMSE\n(per task; lower is better)", fontsize=10)
    fig.colorbar(image, ax=ax)
    return fig


def with_paper_rows(comparison: pd.DataFrame, metric: str, set_name: str) -> pd.DataFrame:
    """Models × benchmarks of our seed means, each model followed by its paper row where
    the paper has any number for it (`boom_reference.compare` output)."""
    cells = comparison[(comparison["metric"] == metric) & (comparison["set"] == set_name)]
    ours = cells.pivot(index="model", columns="benchmark", values="mean")
    paper = cells.pivot(index="model", columns="benchmark", values="paper_mean")
    rows = []
    for model in ours.index:
        rows.append(ours.loc[model].rename(model))
        if paper.loc[model].notna().any():
            rows.append(paper.loc[model].rename(f"{model} · {PAPER_LABEL}"))
    return pd.DataFrame(rows)


def r2_heatmaps(comparison: pd.DataFrame) -> Figure:
    """BOOM Fig. 2: ID R² and OOD binned R², models × tasks, on one colour scale from
    the lowest score shown (at least -1: a worse cell is clipped, its number stays) to 1."""
    panels = {
        "ID R²": with_paper_rows(comparison, "r2", "ID"),
        "OOD binned R²": with_paper_rows(comparison, "r2", "OOD"),
    }
    values = np.concatenate([p.to_numpy(dtype=float).ravel() for p in panels.values()])
    values = values[np.isfinite(values)]
    low = max(float(values.min()) if values.size else 0.0, -1.0)
    norm = Normalize(vmin=min(low, 0.0), vmax=1.0)
    n_rows = max(len(p) for p in panels.values())
    n_columns = max(p.shape[1] for p in panels.values())
    fig = _figure(n_rows, n_columns, panels=2)
    axes = fig.subplots(1, 2, sharey=True)
    image = None
    for ax, (title, panel) in zip(axes, panels.items(), strict=True):
        image = _draw(ax, panel.reindex(panels["ID R²"].index), norm, "viridis", ".2f")
        ax.set_title(title, fontsize=10)
    fig.colorbar(image, ax=axes, label="higher is better")
    return fig


def rmse_over_task_mean(comparison: pd.DataFrame) -> pd.DataFrame:
    """BOOM Fig. 8's numbers: seed-mean OOD RMSE over the mean of the full-run models on
    the same task (flagged columns are shown, never part of the mean); paper rows are
    divided by the same (our) mean, so each compares with ours directly. A last column
    averages each row over the tasks it has."""
    table = with_paper_rows(comparison, "rmse", "OOD")
    full = [m for m in table.index if not flags(m) and not m.endswith(PAPER_LABEL)]
    ratio = table / table.loc[full].mean(axis=0)
    ratio[MEAN_COLUMN] = ratio.mean(axis=1)
    return ratio


def normalized_rmse_heatmap(comparison: pd.DataFrame) -> Figure:
    """BOOM Fig. 8 as a heatmap on a log scale centred on 1 (the task's mean model);
    cells outside 0.1-10 are clipped in colour, not in their number."""
    ratio = rmse_over_task_mean(comparison)
    fig = _figure(len(ratio), ratio.shape[1])
    ax = fig.add_subplot()
    image = _draw(ax, ratio, LogNorm(vmin=0.1, vmax=10.0, clip=True), "RdYlGn_r", ".3g")
    ax.axvline(ratio.shape[1] - 1.5, color="black", linewidth=1)
    ax.set_title("OOD RMSE ÷ mean over models (per task; < 1 is better)", fontsize=10)
    fig.colorbar(image, ax=ax)
    return fig


def similarity_heatmap(similarity: pd.DataFrame, order: list[str], title: str) -> Figure:
    """Clustered matrix of Spearman ρ between models' OOD predictions."""
    matrix = similarity.reindex(index=order, columns=order)
    fig = _figure(len(order), len(order))
    ax = fig.add_subplot()
    image = _draw(ax, matrix, Normalize(vmin=-1.0, vmax=1.0), "coolwarm", ".2f")
    ax.set_title(title, fontsize=10)
    fig.colorbar(image, ax=ax, label="Spearman ρ")
    return fig
