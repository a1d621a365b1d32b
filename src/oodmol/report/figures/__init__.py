"""The report's figures, after BOOM's: heatmaps (Fig. 2, Fig. 8, similarity), ID/OOD bars
(Fig. 3), parity grids (Appendix D) and calibration, the ID-OOD fit (Fig. 11).

Each function returns a matplotlib Figure on the Agg canvas (no pyplot, no display);
`oodmol.plotting.save_figure` writes it as PNG (for the pages) and SVG (for print)."""
