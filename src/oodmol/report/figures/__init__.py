"""The report's figures, after BOOM's: heatmaps (Fig. 2, Fig. 8, similarity), ID/OOD bars
(Fig. 3), parity grids (Appendix D) and calibration, the ID-OOD fit (Fig. 11).

Each function returns a matplotlib Figure on the Agg canvas (no pyplot, no display);
`save_figure` writes it as PNG (for the pages) and SVG (for print)."""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

DPI = 110


def save_figure(fig: Figure, stem: Path) -> list[Path]:
    """Write `<stem>.png` and `<stem>.svg`; the SVG has no date, so that rebuilding a
    report from the same runs gives the same files."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    png, svg = stem.with_name(stem.name + ".png"), stem.with_name(stem.name + ".svg")
    fig.savefig(png, dpi=DPI)
    fig.savefig(svg, metadata={"Date": None})
    return [png, svg]
