"""The leaderboard's physics table: each kind's best model per task beside BOOM's best."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from oodmol.report.physics import (
    BOOM_OOD,
    BOOM_RATIO,
    boom_best,
    markdown,
    physics_rows,
    physics_table,
    uses_physics,
)


def test_booms_best_is_the_lowest_ood_rmse_of_its_tables() -> None:
    best = boom_best()
    assert best.loc["qm9_homo", BOOM_OOD] == pytest.approx(0.0126)
    assert best.loc["csd10k_density", BOOM_OOD] == pytest.approx(0.0279)
    assert best.loc["lipophilicity", BOOM_OOD] == pytest.approx(0.956)


def test_each_kind_keeps_its_best_model() -> None:
    rows = pd.DataFrame(
        {
            "task": ["qm9_homo"] * 5,
            "model": [
                "mean Δphysics",
                "mean Δphysics (fit=calibration) (weighting=tails)",
                "rf",
                "rf Δphysics",
                "physics-krr_rbf",
            ],
            "ood_rmse": [0.02, 0.015, 0.03, 0.009, 0.011],
            "id_rmse": [0.01, 0.01, 0.005, 0.006, 0.004],
            "seeds": [1, 1, 3, 3, 1],
        }
    )
    rows["ratio"] = rows["ood_rmse"] / rows["id_rmse"]
    rows["physics"] = rows["model"].map(uses_physics)
    table = physics_table(rows)
    line = table.loc["qm9_homo"]
    assert line["physics alone: OOD RMSE"] == 0.015  # every fit of the line alone counts
    assert line["physics alone: model"] == "mean Δphysics (fit=calibration) (weighting=tails)"
    assert line["best without physics: model"] == "rf"
    assert line["best with physics: model"] == "rf Δphysics"
    assert line["best with physics: OOD/ID"] == pytest.approx(1.5)
    assert line["best oodmol / BOOM"] == pytest.approx(0.009 / 0.0126)
    assert not math.isnan(line[BOOM_RATIO])


def test_runs_that_left_out_unrepresentable_molecules_count_subsets_do_not() -> None:
    runs = pd.DataFrame(
        {
            "task": ["csd10k_hof"] * 3,
            "model": [
                "descriptors_physics-ridge [left_out]",
                "descriptors_physics-ridge [subset, left_out]",
                "rf",
            ],
            "ood.rmse": [12.0, 11.0, 140.0],
            "id.rmse": [7.0, 6.0, 24.0],
            "seed": [0, 0, 0],
        }
    )
    rows = physics_rows(runs).set_index("model")
    assert list(rows.index) == ["descriptors_physics-ridge [left_out]", "rf"]
    assert rows.loc["descriptors_physics-ridge [left_out]", "physics"]
    assert not rows.loc["rf", "physics"]


def test_a_run_with_a_stretch_is_also_a_model_of_its_own() -> None:
    """A run that recorded its stretched predictions stands twice: as itself, and as
    "<label> (stretched)" with the stretched RMSE (flags kept last); a run recorded
    before the stretch, or whose stretch was refused, only once."""
    runs = pd.DataFrame(
        {
            "task": ["lipophilicity"] * 3,
            "model": ["chemprop Δphysics [left_out]", "rf", "mlp"],
            "ood.rmse": [1.0, 1.5, 1.4],
            "id.rmse": [0.5, 0.6, 0.6],
            "stretched.ood.rmse": [0.9, float("nan"), 1.3],
            "stretched.id.rmse": [0.6, float("nan"), 0.7],
            "seed": [0, 0, 0],
        }
    )
    rows = physics_rows(runs.drop(index=2)).set_index("model")
    stretched = rows.loc["chemprop Δphysics (stretched) [left_out]"]
    assert (stretched["ood_rmse"], stretched["id_rmse"], stretched["physics"]) == (0.9, 0.6, True)
    assert len(rows) == 3 and rows.loc["chemprop Δphysics [left_out]", "ood_rmse"] == 1.0
    older = runs.drop(columns=["stretched.ood.rmse", "stretched.id.rmse"])
    assert len(physics_rows(older)) == 3
    shortened = runs.assign(model=["rf [shortened]", "mlp [shortened]", "rf [subset]"])
    assert physics_rows(shortened).empty


@pytest.mark.parametrize(
    ("label", "reads_physics"),
    [
        ("mean Δphysics [left_out]", True),
        ("rf Δphysics", True),
        ("physics-krr_rbf", True),
        ("descriptors_physics-ridge [left_out]", True),
        ("descriptors-ridge", False),
        ("rf", False),
        ("physchem-krr_rbf", False),
    ],
)
def test_which_models_read_the_physics(label: str, reads_physics: bool) -> None:
    assert uses_physics(label) is reads_physics


def test_the_markdown_names_booms_columns_and_dashes_a_kind_without_runs() -> None:
    rows = pd.DataFrame(
        {"task": ["qm9_mu"], "model": ["physics-ridge"], "ood_rmse": [0.5], "id_rmse": [0.25]}
    )
    rows["ratio"], rows["seeds"] = 2.0, 1
    rows["physics"] = rows["model"].map(uses_physics)
    header, _, line = markdown(physics_table(rows)).splitlines()[2:5]
    assert "BOOM's best: OOD RMSE" in header and "boom_" not in header
    cells = dict(zip(header.strip("| ").split(" | "), line.strip("| ").split(" | "), strict=True))
    assert cells["best without physics: model"] == "–"
    assert cells["best without physics: OOD RMSE"] == "–"
    assert cells["BOOM's best: OOD RMSE"] == "2.173"
    assert cells["best with physics: OOD RMSE"] == "0.5"
