"""Model × task heatmap of OOD performance, in the spirit of BOOM's Figure 2."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import Normalize
from matplotlib.figure import Figure


def normalized_ood_rmse(summary: pd.DataFrame) -> pd.DataFrame:
    """Seed-mean OOD RMSE divided by the best (lowest) model's on the same task.

    Rows are models, columns benchmarks; 1.00 marks the best model of a task and 1.50
    an error 50% above it. NaN where a model has no finite OOD RMSE for a task.
    """
    rows = summary[(summary["metric"] == "rmse") & (summary["set"] == "OOD")]
    rmse = rows.pivot(index="model", columns="benchmark", values="mean")
    return rmse / rmse.min(axis=0)


def ood_heatmap(summary: pd.DataFrame, path: str | Path) -> Figure:
    """Save (PNG) and return a heatmap of OOD RMSE relative to the best model per task.

    Why this quantity rather than OOD binned R²: RMSE is defined for every run, while
    binned R² is NaN whenever an OOD tail has fewer than two molecules and can be
    arbitrarily negative, which would let one bad cell stretch the colour scale.
    Raw RMSE is in each property's own units and cannot share one colour scale, so it
    is divided by the task's best OOD RMSE: the ratio is unitless, and reads directly
    as "how many times the best model's OOD error". Lower (darker) is better; cells
    are annotated with the ratio, blank cells mean no run.
    """
    ratio = normalized_ood_rmse(summary)
    values = ratio.to_numpy(dtype=float)
    finite = values[np.isfinite(values)]
    norm = Normalize(vmin=1.0, vmax=max(float(finite.max()) if finite.size else 1.0, 1.01))

    n_models, n_tasks = values.shape
    fig = Figure(figsize=(2.0 + 1.1 * n_tasks, 2.2 + 0.5 * n_models), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    image = ax.imshow(np.ma.masked_invalid(values), cmap="viridis", norm=norm, aspect="auto")
    for i in range(n_models):
        for j in range(n_tasks):
            if np.isfinite(values[i, j]):
                dark = norm(values[i, j]) < 0.5
                ax.text(
                    j,
                    i,
                    f"{values[i, j]:.2f}",
                    ha="center",
                    va="center",
                    color="white" if dark else "black",
                    fontsize=8,
                )
    ax.set_xticks(range(n_tasks), ratio.columns, rotation=45, ha="right")
    ax.set_yticks(range(n_models), ratio.index)
    ax.set_title("OOD RMSE / best model's OOD RMSE (per task)")
    fig.colorbar(image, ax=ax)
    fig.savefig(path, dpi=150)
    return fig
