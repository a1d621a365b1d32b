"""The three uncertainty figures of a run: interval calibration, error calibration and
confidence curves, ID and OOD on each (colours as in the parity plot).

Figures are built on the Agg canvas without pyplot (as `parity_plot`), saved as PNG and
returned so that loggers can take them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from oodmol.plotting import SET_COLORS, SET_LABELS
from oodmol.uq.metrics import LEVELS, PERCENTS


@dataclass
class SetCurves:
    """What the figures draw for one test set, from its total σ: the calibration curve
    (observed coverage per level), RMV and RMSE per σ bin, the confidence and oracle
    curves, and the calibration curves after recalibration by their figure label."""

    observed: np.ndarray
    rmv: np.ndarray
    rmse: np.ndarray
    confidence: np.ndarray
    oracle: np.ndarray
    recalibrated: dict[str, np.ndarray] = field(default_factory=dict)


def _figure() -> tuple[Figure, object]:
    fig = Figure(figsize=(5, 5), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def _save_square(
    fig: Figure, ax, limit: float, xlabel: str, ylabel: str, path: str | Path
) -> Figure:
    """Both axes from 0 to `limit` at equal scale, so the diagonal means 'calibrated'."""
    ax.set_xlim(0, limit)
    ax.set_ylim(0, limit)
    ax.set_aspect("equal")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(loc="upper left")
    fig.savefig(path, dpi=150)
    return fig


def calibration_plot(path: str | Path, curves: dict[str, SetCurves]) -> Figure:
    """Observed against expected coverage of the central intervals; dashed: after
    recalibration on the validation set (z-scaling). Below the diagonal is
    overconfident."""
    fig, ax = _figure()
    ax.plot([0, 1], [0, 1], ls=":", lw=1, color="black", label="ideal")
    for name, c in curves.items():
        ax.plot(LEVELS, c.observed, color=SET_COLORS[name], label=SET_LABELS[name])
        for label, observed in c.recalibrated.items():
            ax.plot(
                LEVELS,
                observed,
                color=SET_COLORS[name],
                ls="--",
                label=f"{SET_LABELS[name]}, {label}",
            )
    return _save_square(
        fig, ax, 1.0, "Expected coverage p of the central interval", "Observed coverage", path
    )


def error_calibration_plot(path: str | Path, curves: dict[str, SetCurves], units: str) -> Figure:
    """RMSE against root mean variance per σ bin; calibrated bins lie on the diagonal."""
    fig, ax = _figure()
    values = np.concatenate([np.r_[c.rmv, c.rmse] for c in curves.values()])
    values = values[np.isfinite(values)]
    hi = 1.05 * values.max() if values.size and values.max() > 0 else 1.0
    ax.plot([0, hi], [0, hi], ls=":", lw=1, color="black", label="ideal")
    for name, c in curves.items():
        ax.plot(c.rmv, c.rmse, marker="o", color=SET_COLORS[name], label=SET_LABELS[name])
    unit = f" ({units})" if units else ""
    return _save_square(fig, ax, hi, f"RMV per bin{unit}", f"RMSE per bin{unit}", path)


def confidence_plot(path: str | Path, curves: dict[str, SetCurves], units: str) -> Figure:
    """RMSE of the n % most confident molecules (solid) and of the n % with the smallest
    errors (the oracle, dotted)."""
    fig, ax = _figure()
    for name, c in curves.items():
        ax.plot(PERCENTS, c.confidence, color=SET_COLORS[name], label=f"{SET_LABELS[name]} by σ")
        ax.plot(
            PERCENTS,
            c.oracle,
            color=SET_COLORS[name],
            ls=":",
            label=f"{SET_LABELS[name]} oracle",
        )
    unit = f" ({units})" if units else ""
    ax.set_xlim(0, 100)
    ax.set_xlabel("Most confident molecules kept (%)")
    ax.set_ylabel(f"RMSE{unit}")
    ax.legend(loc="upper left")
    fig.savefig(path, dpi=150)
    return fig


def uncertainty_figures(
    out_dir: Path, curves: dict[str, SetCurves], units: str
) -> dict[str, Figure]:
    """Write calibration.png, error_calibration.png and confidence.png; returns them by
    name for the loggers."""
    out_dir = Path(out_dir)
    return {
        "calibration": calibration_plot(out_dir / "calibration.png", curves),
        "error_calibration": error_calibration_plot(
            out_dir / "error_calibration.png", curves, units
        ),
        "confidence": confidence_plot(out_dir / "confidence.png", curves, units),
    }
