"""What every figure of the project shares: the palette (BOOM's colours, OOD molecules
blue and ID molecules orange, and the sets' labels), a figure drawn without pyplot, and
the two ways figures are written (an analysis's numbers and figure side by side; the
leaderboard's figures).

The figures themselves live with what they show: the parity plot with the metrics
(`oodmol.metrics.plots`), the uncertainty figures with their maths (`oodmol.uq.plots`),
the leaderboard's with the report (`oodmol.report.figures`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

SET_COLORS = {"id": "tab:orange", "ood": "tab:blue"}
SET_LABELS = {"id": "ID", "ood": "OOD"}
DPI = 110  # the leaderboard's PNGs


def new_figure() -> Figure:
    """A figure drawn without pyplot (no global state, no display)."""
    figure = Figure(figsize=(6.0, 4.5))
    FigureCanvasAgg(figure)
    return figure


def write_outputs(table: pd.DataFrame, figure: Figure, out: Path, stem: str) -> list[Path]:
    """An analysis's numbers and figure: `<out>/<stem>.csv|png|svg`; the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{stem}.{ext}" for ext in ("csv", "png", "svg")]
    table.to_csv(paths[0], index=False)
    figure.savefig(paths[1], dpi=150, bbox_inches="tight")
    figure.savefig(paths[2], bbox_inches="tight")
    return paths


def save_figure(fig: Figure, stem: Path) -> list[Path]:
    """Write `<stem>.png` (for the pages) and `<stem>.svg` (for print); the SVG has no
    date, so that rebuilding a report from the same runs gives the same files."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    png, svg = stem.with_name(stem.name + ".png"), stem.with_name(stem.name + ".svg")
    fig.savefig(png, dpi=DPI)
    fig.savefig(svg, metadata={"Date": None})
    return [png, svg]
