"""oodmol campaign-report on synthetic round records: the table's means and spreads by
hand, the figure's lines are the table's recalls from (0, 0), and what cannot be
tabulated is refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from oodmol.campaign.comparison import campaign_figure, campaign_rows, campaign_table
from oodmol.cli.campaign import report


def _campaign(folder: Path, rule: str, seed: int, recalls: list[float], rmse: list[float]) -> None:
    """A campaign folder as `oodmol campaign` leaves it, batches of 5 from a pool of 40."""
    (folder / "rounds").mkdir(parents=True)
    description = {
        "task": "tiny",
        "model": "mlp",
        "uq": "ensemble",
        "seed": seed,
        "settings": {"acquisition": rule, "direction": "max", "batch": 5},
    }
    (folder / "campaign.json").write_text(json.dumps(description))
    (folder / "pool.json").write_text(json.dumps({"mol_id": list(range(40))}))
    for r, (recall, error) in enumerate(zip(recalls, rmse, strict=True)):
        record = {
            "round": r,
            "n_acquired": 5 * (r + 1),
            "recall": recall,
            "best_found": 10.0 * recall + seed,
            "ood_rmse": error,
            "acquired": [],
        }
        (folder / "rounds" / f"{r}.json").write_text(json.dumps(record))


@pytest.fixture
def campaigns(tmp_path: Path) -> Path:
    _campaign(tmp_path / "a" / "greedy" / "0", "greedy", 0, [0.25, 0.5], [1.0, 0.8])
    _campaign(tmp_path / "a" / "greedy" / "1", "greedy", 1, [0.0, 0.75], [2.0, 1.2])
    _campaign(tmp_path / "b" / "random", "random", 0, [0.0, 0.25], [1.5, 1.5])
    return tmp_path


def test_table_holds_the_mean_and_sd_over_campaigns(campaigns: Path) -> None:
    rows = campaign_rows([campaigns / "a", campaigns / "b"])
    assert len(rows) == 6 and set(rows["model"]) == {"mlp+ensemble"}
    table = campaign_table(rows).set_index(["acquisition", "round"])
    greedy = table.loc[("greedy", 1)]
    assert greedy["campaigns"] == 2 and greedy["n_acquired"] == 10 and greedy["n_pool"] == 40
    assert greedy["recall_mean"] == pytest.approx(0.625)
    assert greedy["recall_std"] == pytest.approx(np.std([0.5, 0.75], ddof=1))
    assert greedy["best_found_mean"] == pytest.approx((5.0 + 8.5) / 2)
    assert greedy["ood_rmse_mean"] == pytest.approx(1.0)
    random = table.loc[("random", 0)]
    assert random["campaigns"] == 1 and np.isnan(random["recall_std"])
    assert random["ood_rmse_mean"] == 1.5


def test_figure_draws_the_tables_recall_from_the_origin(campaigns: Path) -> None:
    table = campaign_table(campaign_rows([campaigns]))
    (ax,) = campaign_figure(table).axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    np.testing.assert_allclose(lines["greedy"].get_xdata(), [0, 5, 10])
    np.testing.assert_allclose(lines["greedy"].get_ydata(), [0.0, 0.125, 0.625])
    np.testing.assert_allclose(lines["random"].get_ydata(), [0.0, 0.0, 0.25])
    # a random batch finds on average acquired / pool of the top molecules
    np.testing.assert_allclose(lines["random, expected"].get_ydata(), [0.0, 10 / 40])


def test_command_writes_csv_png_svg_and_refuses_what_it_cannot_tabulate(
    campaigns: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "figure"
    assert report([str(campaigns), "--out", str(out)]) == 0
    assert (out / "campaigns.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "campaigns.svg").is_file()
    assert len(pd.read_csv(out / "campaigns.csv")) == 4
    assert report([str(tmp_path / "nothing-here"), "--out", str(out)]) == 2
    assert "no such folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert report([str(tmp_path / "empty"), "--out", str(out)]) == 2
    assert "no recorded campaign round" in capsys.readouterr().err
    # campaigns of one rule whose rounds acquired differently are not averaged
    other = tmp_path / "a" / "greedy" / "0" / "rounds" / "1.json"
    record = json.loads(other.read_text())
    other.write_text(json.dumps({**record, "n_acquired": 12}))
    assert report([str(campaigns), "--out", str(out)]) == 2
    assert "campaigns acquired" in capsys.readouterr().err
