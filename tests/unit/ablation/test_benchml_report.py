"""Known answers for BenchML's figures (`oodmol ablation benchml`), from synthetic runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from run_folders import PNG_MAGIC, run_folder

from oodmol.cli.ablation import benchml

FIT = {"fit": {"method": "krr", "kernel": "rbf"}}
IDS = list(range(20))


def predictions(folder: Path, errors: np.ndarray) -> None:
    rows = ["mol_id,smiles,set,y_true,y_pred"]
    rows += [f"{i},C,ood,1.0,{1.0 + e}" for i, e in zip(IDS, errors, strict=True)]
    (folder / "predictions.csv").write_text("\n".join(rows) + "\n")


def benchml_runs(root: Path) -> None:
    """Task t: soap-krr_rbf (ID 1, OOD 3), soap-ridge (ID 2, OOD 2.5), ecfp4-krr_rbf (ID 1,
    OOD 4); rf over two seeds (OOD 5 and 7); an MLP ensemble (not the MLP); learning
    curves of soap-krr_rbf whose ID RMSE falls as n^-0.5 and OOD RMSE as n^-0.1."""
    rng = np.random.default_rng(0)
    shared = rng.normal(size=len(IDS))
    full = [
        ("soap", "krr_rbf", 1.0, 3.0),
        ("soap", "ridge", 2.0, 2.5),
        ("ecfp4", "krr_rbf", 1.0, 4.0),
    ]
    for representation, regressor, id_rmse, ood_rmse in full:
        folder = root / f"{representation}-{regressor}"
        metrics = {
            "task": "t",
            "model": f"{representation}-{regressor}",
            "split": "ood",
            "seed": 0,
            "id": {"rmse": id_rmse, "r2": 0.5},
            "ood": {"rmse": ood_rmse, "n": 20},
            **FIT,
        }
        run_folder(folder, metrics)
        # soap's and ecfp4's krr errors share most of their noise: correlated
        noise = shared if representation == "soap" else shared + 0.1 * rng.normal(size=len(IDS))
        predictions(folder, noise)
    for seed, ood in ((0, 5.0), (1, 7.0)):
        run_folder(
            root / f"rf-{seed}",
            {
                "task": "t",
                "model": "rf",
                "split": "ood",
                "seed": seed,
                "ood": {"rmse": ood, "n": 20},
                "uq": {"method": "native"},  # the forest's σ: its own prediction
            },
        )
    run_folder(  # an ensemble's mean is another model than the MLP: left out
        root / "mlp-ensemble",
        {
            "task": "t",
            "model": "mlp",
            "split": "ood",
            "seed": 0,
            "ood": {"rmse": 1.0, "n": 20},
            "uq": {"method": "ensemble"},
        },
    )
    for fraction, n in ((0.25, 100), (0.5, 200), (1.0, 400)):
        run_folder(
            root / f"lc-{fraction}",
            {
                "task": "t",
                "model": "soap-krr_rbf",
                "split": "ood_subset",
                "seed": 0,
                "data": {"sizes_used": {"train": n}},
                "id": {"rmse": 10.0 * n**-0.5, "r2": 0.5},
                "ood": {"rmse": 10.0 * n**-0.1, "n": 20},
                **FIT,
            },
            f"split:\n  name: ood_subset\n  subset: [{fraction}, 0]\n",
        )


def test_the_benchml_report_answers_from_the_runs(tmp_path: Path) -> None:
    benchml_runs(tmp_path / "runs")
    boom = tmp_path / "boom"
    boom.mkdir()
    (boom / "table7_rmse.csv").write_text(
        "model,representation,set,task,rmse\n"
        "Random Forest,SMILES,OOD,t,6.0\nChemprop,Graph,OOD,t,2.0\nMACE,3D,OOD,t,2.2\n"
        "Chemprop,Graph,ID,t,0.1\n"
    )
    (boom / "table9_lipophilicity_rmse.csv").write_text("model,set,task,rmse,rmse_std\n")
    out = tmp_path / "out"
    assert benchml([str(tmp_path / "runs"), "--out", str(out), "--boom-tables", str(boom)]) == 0
    table = pd.read_csv(out / "benchml-rmse.csv").set_index(["representation", "regressor"])
    assert table.loc[("soap", "krr_rbf"), "ratio"] == pytest.approx(3.0)
    assert table.loc[("descriptors", "rf"), "ood_rmse"] == pytest.approx(6.0)  # two seeds
    assert table.loc[("descriptors", "rf"), "seeds"] == 2
    best = pd.read_csv(out / "benchml-ratio.csv").set_index("representation")
    assert best.loc["soap", "regressor"] == "ridge"  # OOD 2.5 < 3.0
    slopes = pd.read_csv(out / "benchml-slopes.csv").iloc[0]
    assert slopes["id_slope"] == pytest.approx(-0.5) and slopes["ood_slope"] == pytest.approx(-0.1)
    assert slopes["ood_over_id"] == pytest.approx(0.2)
    similarity = pd.read_csv(out / "benchml-similarity.csv")
    pair = similarity[(similarity["a"] == "soap") & (similarity["b"] == "ecfp4")]
    assert pair["error_correlation"].iloc[0] > 0.9
    answers = pd.read_csv(out / "benchml-answers.csv").iloc[0]
    assert answers["best"] == "soap-ridge" and answers["best_ood_rmse"] == pytest.approx(2.5)
    assert answers["rf_ood_rmse"] == pytest.approx(6.0)
    assert pd.isna(answers["mlp_ood_rmse"])
    assert answers["boom_best_deep_model"] == "Chemprop"
    assert answers["boom_best_deep_ood_rmse"] == pytest.approx(2.0)
    assert answers["boom_random_forest_ood_rmse"] == pytest.approx(6.0)
    for stem in ("benchml-rmse", "benchml-ratio", "benchml-learning-curves-t", "benchml-slopes"):
        assert (out / f"{stem}.png").read_bytes()[:8] == PNG_MAGIC


def test_a_folder_without_benchml_runs_is_an_error(tmp_path: Path, capsys) -> None:
    run_folder(tmp_path / "runs" / "x", {"task": "t", "model": "chemprop", "split": "ood"})
    assert benchml([str(tmp_path / "runs"), "--out", str(tmp_path / "out")]) == 2
    assert "no complete run of a BenchML regressor" in capsys.readouterr().err
