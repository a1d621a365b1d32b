"""Known answers for `oodmol ablation geometry`: RMSE per model and geometry, the 3D
models' OOD ranks and gap to the best 2D model, and per-molecule error changes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from run_folders import PNG_MAGIC, run_folder

from oodmol.ablation.geometry import geometry_figure
from oodmol.cli import ablation

GRAPH3D = "oodmol.data.featurize.graph3d.Graph3D"
# (model, geometry, seed, id rmse, ood rmse): schnet is better than painn on mmff, worse
# on xtb; the 2D tgnn's OOD RMSE is 2.0
RUNS = [
    ("schnet", "mmff", 0, 1.0, 3.0),
    ("schnet", "mmff", 1, 1.2, 3.2),
    ("schnet", "xtb", 0, 0.9, 2.6),
    ("painn", "mmff", 0, 1.1, 4.0),
    ("painn", "xtb", 0, 0.8, 2.2),
    ("tgnn", "2d", 0, 0.7, 2.0),
]


def _runs(root: Path) -> None:
    for model, geometry, seed, id_rmse, ood_rmse in RUNS:
        folder = root / f"{model}-{geometry}-{seed}"
        target = GRAPH3D if geometry != "2d" else "oodmol.data.featurize.graph2d.Graph2D"
        conformers = "mmff" if geometry == "2d" else geometry
        run_folder(
            folder,
            {
                "task": "csd10k_density",
                "model": model,
                "split": "ood",
                "seed": seed,
                "data": {"geometry_filter": {"left_out": {"train": 3}}},
                "id": {"rmse": id_rmse, "r2": 0.5, "n": 2},
                "ood": {"rmse": ood_rmse, "n": 2},
            },
            f"model:\n  featurizer:\n    _target_: {target}\nconformers:\n  name: {conformers}\n",
        )
        # predictions: molecule 1 (ID) and 2 (OOD); xtb halves the OOD error of painn
        ood_error = {"mmff": 1.0, "xtb": 0.5, "2d": 0.3}[geometry]
        pd.DataFrame(
            {
                "mol_id": [1, 2],
                "smiles": ["C", "CC"],
                "set": ["id", "ood"],
                "y_true": [0.0, 0.0],
                "y_pred": [0.1, ood_error],
            }
        ).to_csv(folder / "predictions.csv", index=False)
    run_folder(  # not a geometry experiment's run: not read
        root / "other", {"task": "csd10k_density", "model": "mlp", "ood": {"rmse": 9.0, "n": 2}}
    )


def test_geometry_table_ranks_and_gaps(tmp_path: Path, capsys) -> None:
    _runs(tmp_path / "runs")
    changes = tmp_path / "changes.csv"
    changes.write_text(
        "mol_id,smiles,passed,problem,rmsd_heavy,rmsd_all,energy_change_kcal\n"
        '1,C,1,"",0.1,0.2,-1.5\n2,CC,1,"",0.3,0.4,-6.0\n'
    )
    out = tmp_path / "out"
    argv = [str(tmp_path / "runs"), "--out", str(out), "--changes", str(changes)]
    assert ablation.geometry(argv) == 0
    table = pd.read_csv(out / "geometry.csv")
    schnet_mmff = table[(table["model"] == "schnet") & (table["geometry"] == "mmff")].iloc[0]
    assert schnet_mmff["seeds"] == 2
    assert schnet_mmff["ood_rmse_mean"] == pytest.approx(3.1)
    assert schnet_mmff["ood_rank_3d"] == 1
    assert schnet_mmff["ood_over_best_2d"] == pytest.approx(1.55)
    painn_xtb = table[(table["model"] == "painn") & (table["geometry"] == "xtb")].iloc[0]
    assert painn_xtb["ood_rank_3d"] == 1 and painn_xtb["ood_over_best_2d"] == pytest.approx(1.1)
    assert np.isnan(table[table["geometry"] == "2d"]["ood_rank_3d"]).all()
    printed = capsys.readouterr().out
    assert "mmff: schnet < painn; xtb: painn < schnet (changed)" in printed
    assert "best 3D OOD RMSE / best 2D OOD RMSE mmff: 1.55; xtb: 1.1" in printed
    molecules = pd.read_csv(out / "geometry-molecules.csv")
    ood = molecules[(molecules["set"] == "ood") & (molecules["seed"] == 0)]
    assert sorted(ood["error_change"]) == pytest.approx([-0.5, -0.5])
    assert ood["rmsd_heavy"].tolist() == [0.3, 0.3]
    assert ood["energy_change_kcal"].tolist() == [-6.0, -6.0]
    assert len(molecules) == 4  # seed 1 of schnet has no xtb run to pair with
    paired = pd.read_csv(out / "geometry-paired.csv").set_index("model")
    assert paired.loc["schnet", "seeds"] == 1  # seed 1 has no xtb run
    assert paired.loc["schnet", "ood_change_mean"] == pytest.approx(-0.4)
    assert np.isnan(paired.loc["schnet", "ood_change_ci95"])
    assert (
        "schnet: OOD RMSE on xtb minus on mmff: -0.4 (-13.3%), 1 paired seed, lower on 1 of 1"
        in printed
    )
    assert (out / "geometry.png").read_bytes()[:8] == PNG_MAGIC


def test_the_geometry_change_is_paired_by_seed_with_its_interval(tmp_path: Path, capsys) -> None:
    """Three seeds of one model on each geometry: the change of each seed's OOD RMSE, its
    mean, sd and Student's-t 95 % half-width (t = 4.303 at two degrees of freedom)."""
    for seed, (mmff, xtb) in enumerate([(3.0, 2.8), (3.2, 3.3), (3.4, 3.0)]):
        for geometry, ood in (("mmff", mmff), ("xtb", xtb)):
            run_folder(
                tmp_path / "runs" / f"{geometry}-{seed}",
                {
                    "task": "csd10k_density",
                    "model": "schnet",
                    "seed": seed,
                    "data": {"geometry_filter": {"left_out": {}}},
                    "id": {"rmse": 1.0, "n": 2},
                    "ood": {"rmse": ood, "n": 2},
                },
                f"model:\n  featurizer:\n    _target_: {GRAPH3D}\n"
                f"conformers:\n  name: {geometry}\n",
            )
    out = tmp_path / "out"
    assert ablation.geometry([str(tmp_path / "runs"), "--out", str(out)]) == 0
    paired = pd.read_csv(out / "geometry-paired.csv").iloc[0]
    assert (paired["geometry"], paired["seeds"], paired["seeds_lower"]) == ("xtb", 3, 2)
    assert paired["ood_change_mean"] == pytest.approx(-1 / 6)
    sd = np.std([-0.2, 0.1, -0.4], ddof=1)
    assert paired["ood_change_sd"] == pytest.approx(sd)
    assert paired["ood_change_ci95"] == pytest.approx(4.302653 * sd / np.sqrt(3))
    assert paired["ood_change_relative"] == pytest.approx(-1 / 6 / 3.2)
    printed = capsys.readouterr().out
    assert (
        "csd10k_density, schnet: OOD RMSE on xtb minus on mmff: -0.167 ± 0.625 (-5.2%), "
        "3 paired seeds, 95 % interval, lower on 2 of 3"
    ) in printed


def test_the_figure_draws_each_paired_change_in_percent_with_its_interval() -> None:
    table = pd.DataFrame(
        {
            "task": ["t"] * 2,
            "model": ["schnet"] * 2,
            "geometry": ["mmff", "xtb"],
            "ood_rmse_mean": [3.2, 3.0],
            "ood_rmse_sd": [0.2, 0.3],
            "id_rmse_mean": [1.0, 1.0],
        }
    )
    paired = pd.DataFrame(
        [
            {"task": "t", "model": "schnet", "geometry": "xtb", "seeds": 3},
            {"task": "t", "model": "painn", "geometry": "xtb", "seeds": 1},
        ]
    ).assign(
        ood_rmse_base=[3.2, 4.0],
        ood_change_mean=[-0.16, 0.4],
        ood_change_ci95=[0.64, np.nan],
    )
    figure = geometry_figure(table, None, paired)
    _, changes = figure.axes
    points = [line.get_xdata()[0] for line in changes.lines if len(line.get_xdata()) == 1]
    assert points[:2] == pytest.approx([-5.0, 10.0])  # % of the MMFF94 OOD RMSE
    spans = [c.get_segments()[0][:, 0] for c in changes.collections if c.get_segments()]
    assert spans[0] == pytest.approx([-25.0, 15.0])  # ± 20 %
    assert len(spans) == 1  # one seed: no interval
    labels = [t.get_text() for t in changes.get_yticklabels()]
    assert labels == ["t schnet (xtb, 3 seeds)", "t painn (xtb, 1 seed)"]


def test_no_geometry_runs_is_a_user_error(tmp_path: Path, capsys) -> None:
    run_folder(tmp_path / "runs" / "a", {"task": "t", "model": "mlp", "ood": {"rmse": 1.0}})
    assert ablation.geometry([str(tmp_path / "runs"), "--out", str(tmp_path / "o")]) == 2
    assert "experiment=geometry" in capsys.readouterr().err


def _run(root: Path, name: str, geometry: str, key: str, epochs: int, seed: int | None = 0) -> None:
    run_folder(
        root / name,
        {
            "task": "csd10k_density",
            "model": "schnet",
            "seed": seed,
            "config_key": key,
            "data": {"geometry_filter": {"left_out": {}}},
            "ood": {"n": 2},
        },
        f"model:\n  max_epochs: {epochs}\n  featurizer:\n    _target_: {GRAPH3D}\n"
        f"conformers:\n  name: {geometry}\n",
    )


@pytest.mark.parametrize(
    ("runs", "phrase"),
    [
        (  # the same seed twice: never averaged in as another seed
            [("a", "mmff", "k1", 20), ("b", "mmff", "k2", 100), ("c", "xtb", "k3", 20)],
            "csd10k_density, schnet on mmff geometries, seed 0: 2 runs",
        ),
        (  # two runs that recorded no seed: not one run, not two seeds
            [("a", "mmff", "k1", 20, None), ("b", "mmff", "k1", 20, None), ("c", "xtb", "k3", 20)],
            "csd10k_density, schnet on mmff geometries, seed not recorded: 2 runs",
        ),
        (  # two epoch budgets as two seeds
            [("a", "mmff", "k1", 20), ("b", "mmff", "k2", 100, 1), ("c", "xtb", "k3", 20)],
            "csd10k_density, schnet on mmff geometries: runs of 2 configurations (keys k1, k2)",
        ),
        (  # the geometries compared at different budgets
            [("a", "mmff", "k1", 100), ("c", "xtb", "k3", 20)],
            "csd10k_density, schnet: its mmff and xtb runs differ in model.max_epochs: "
            "100 against 20",
        ),
    ],
    ids=["seed-twice", "no-seed-twice", "two-configurations", "budgets-differ"],
)
def test_runs_of_other_configurations_are_refused_not_mixed(
    tmp_path: Path, capsys, runs: list, phrase: str
) -> None:
    for run in runs:
        _run(tmp_path / "runs", *run)
    argv = [str(tmp_path / "runs"), "--out", str(tmp_path / "out")]
    assert ablation.geometry(argv) == 2
    err = capsys.readouterr().err
    assert phrase in err and "one configuration of each model" in err
    assert "Traceback" not in err and not (tmp_path / "out").exists()
