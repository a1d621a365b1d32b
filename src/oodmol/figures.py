"""Writing an ablation's numbers and figure: CSV, PNG and SVG side by side."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


def new_figure() -> Figure:
    """A figure drawn without pyplot (no global state, no display)."""
    figure = Figure(figsize=(6.0, 4.5))
    FigureCanvasAgg(figure)
    return figure


def write_outputs(table: pd.DataFrame, figure: Figure, out: Path, stem: str) -> list[Path]:
    """`<out>/<stem>.csv|png|svg`; the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{stem}.{ext}" for ext in ("csv", "png", "svg")]
    table.to_csv(paths[0], index=False)
    figure.savefig(paths[1], dpi=150, bbox_inches="tight")
    figure.savefig(paths[2], bbox_inches="tight")
    return paths
