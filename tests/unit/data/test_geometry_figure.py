"""The check report's figure shows the report's own counts and every molecule's change."""

from __future__ import annotations

import numpy as np

from oodmol.data.geometry_checks import GeometryReport
from oodmol.data.geometry_figure import draw_check_report
from oodmol.plotting import save_figure


def report_of(
    changes: dict[int, list[float]], costs: dict[int, list[float]] | None = None
) -> GeometryReport:
    return GeometryReport(
        geometry="xtb",
        cache="c.lmdb",
        n_molecules=1000,
        failed={1: "bond broken: C1-O2", 2: "bond broken: C3-N4", 3: "no geometry: x"},
        reasons={"bond broken": 2, "no geometry": 1},
        changes=changes,
        costs=costs or {},
    )


def test_bars_are_the_reports_counts_and_histograms_hold_every_molecule(tmp_path) -> None:
    rng = np.random.default_rng(0)
    rmsd, energy = rng.gamma(2.0, 0.2, 997), -rng.gamma(2.0, 5.0, 997)
    changes = {
        i: [float(r), float(r) * 1.2, float(e)]
        for i, (r, e) in enumerate(zip(rmsd, energy, strict=True))
    }
    seconds = rng.gamma(2.0, 0.8, 997)
    costs = {i: [40.0, float(s)] for i, s in enumerate(seconds)}
    figure = draw_check_report(report_of(changes, costs), "csd10k")
    counts, moved, lowered, spent = figure.axes
    assert [p.get_width() for p in counts.patches] == [997, 2, 1]
    assert [t.get_text() for t in counts.get_yticklabels()] == [
        "passed",
        "bond broken",
        "no geometry",
    ]
    for ax, values in ((moved, rmsd), (lowered, -energy), (spent, seconds)):
        shown = sum(p.get_height() for p in ax.patches)
        beyond = int((values > np.quantile(values, 0.995)).sum())
        assert shown + beyond == 997 and beyond > 0
        assert f"{beyond} beyond" in ax.get_title()
    assert lowered.get_xlim()[1] > 0  # energies fall: plotted as positive amounts
    paths = save_figure(figure, tmp_path / "csd10k-xtb")
    assert all(p.stat().st_size > 0 for p in paths)


def test_a_geometry_without_an_optimiser_record_shows_its_counts_alone() -> None:
    figure = draw_check_report(report_of({}), "qm9")
    assert len(figure.axes) == 1
