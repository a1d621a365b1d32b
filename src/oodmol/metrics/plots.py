"""BOOM-style parity plot of predicted vs true values for the ID and OOD test sets."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from numpy.typing import ArrayLike

from oodmol.metrics.regression import regression_metrics
from oodmol.plotting import SET_COLORS, SET_LABELS


def _scatter(
    ax: Axes,
    true: np.ndarray,
    pred: np.ndarray,
    std: ArrayLike | None,
    label: str,
    color: str,
) -> None:
    """Draw one test set, with vertical error bars when a predictive std is given."""
    rmse = regression_metrics(true, pred)["rmse"]
    kwargs = {"color": color, "label": f"{label} (RMSE {rmse:.4g})", "alpha": 0.7}
    if std is None:
        ax.scatter(true, pred, s=12, linewidths=0, **kwargs)
    else:
        yerr = np.asarray(std, dtype=float).ravel()
        ax.errorbar(true, pred, yerr=yerr, fmt="o", ms=3, elinewidth=0.6, **kwargs)


def parity_plot(
    path: str | Path,
    id_true: ArrayLike,
    id_pred: ArrayLike,
    ood_true: ArrayLike,
    ood_pred: ArrayLike,
    property_label: str,
    units: str,
    id_std: ArrayLike | None = None,
    ood_std: ArrayLike | None = None,
) -> Figure:
    """Save a parity plot as PNG at ``path`` and return the figure.

    OOD points are blue, ID points orange, each legend entry carries that set's RMSE,
    the dashed line is y = x, and both axes share the same limits with equal aspect so
    that distance from the diagonal reads the same in every direction. ``*_std`` adds
    ±1 std error bars on the predictions.

    The figure is built on the Agg canvas without pyplot, so it is not registered in
    pyplot's global figure list, nothing here closes it, and the caller may still pass
    it to a logger (TensorBoard ``add_figure``, ``wandb.Image``); it is freed once the
    caller drops its reference.
    """
    id_t, id_p = (np.asarray(a, dtype=float).ravel() for a in (id_true, id_pred))
    ood_t, ood_p = (np.asarray(a, dtype=float).ravel() for a in (ood_true, ood_pred))

    fig = Figure(figsize=(5, 5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    # ID first so that the (usually fewer, more interesting) OOD points sit on top.
    _scatter(ax, id_t, id_p, id_std, SET_LABELS["id"], SET_COLORS["id"])
    _scatter(ax, ood_t, ood_p, ood_std, SET_LABELS["ood"], SET_COLORS["ood"])

    values = np.concatenate([id_t, id_p, ood_t, ood_p])
    values = values[np.isfinite(values)]
    lo, hi = (values.min(), values.max()) if values.size else (0.0, 1.0)
    pad = 0.05 * (hi - lo) or 0.5
    lim = (lo - pad, hi + pad)
    ax.plot(lim, lim, ls="--", lw=1, color="black", zorder=0)
    ax.set_xlim(lim)
    ax.set_ylim(lim)
    ax.set_aspect("equal")

    unit = f" ({units})" if units else ""
    ax.set_xlabel(f"True {property_label}{unit}")
    ax.set_ylabel(f"Predicted {property_label}{unit}")
    ax.legend(loc="upper left")
    fig.savefig(path, dpi=150)
    return fig
