"""The parity plot writes a PNG and keeps the figure usable for loggers."""

import pytest
from matplotlib.figure import Figure

from oodmol.metrics.plots import parity_plot

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("with_std", [False, True])
def test_parity_plot_writes_png(tmp_path, with_std):
    path = tmp_path / "parity.png"
    stds = {"id_std": [0.1, 0.2, 0.1], "ood_std": [0.3, 0.3]} if with_std else {}
    fig = parity_plot(path, [1, 2, 3], [1, 2, 4], [5, 6], [5, 7], "density", "g/cm³", **stds)
    assert isinstance(fig, Figure)
    assert path.read_bytes()[:8] == PNG_MAGIC
    ax = fig.axes[0]
    # ID RMSE = sqrt(1/3) = 0.5774, OOD RMSE = sqrt(1/2) = 0.7071
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["ID (RMSE 0.5774)", "OOD (RMSE 0.7071)"]
    assert ax.get_xlabel() == "True density (g/cm³)"
    assert ax.get_ylabel() == "Predicted density (g/cm³)"
    assert ax.get_xlim() == ax.get_ylim()
