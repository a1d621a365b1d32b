"""Known answers for BenchML's figures (`oodmol ablation benchml`), from synthetic runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from run_folders import PNG_MAGIC, run_folder

from oodmol.ablation.benchml import boom_best_deep
from oodmol.cli.ablation import benchml

TASK = "csd10k_density"  # a task of BOOM's, whose published numbers the report reads
FIT = {"fit": {"method": "krr", "kernel": "rbf"}}
IDS = list(range(20))


def predictions(folder: Path, errors: np.ndarray) -> None:
    rows = ["mol_id,smiles,set,y_true,y_pred"]
    rows += [f"{i},C,ood,1.0,{1.0 + e}" for i, e in zip(IDS, errors, strict=True)]
    (folder / "predictions.csv").write_text("\n".join(rows) + "\n")


def benchml_runs(root: Path) -> None:
    """Task TASK: soap-krr_rbf (ID 1, OOD 3), soap-ridge (ID 2, OOD 2.5), ecfp4-krr_rbf (ID 1,
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
            "task": TASK,
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
                "task": TASK,
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
            "task": TASK,
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
                "task": TASK,
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
    out = tmp_path / "out"
    assert benchml([str(tmp_path / "runs"), "--out", str(out)]) == 0
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
    # BOOM's Table 7 as the package ships it: EGNN the best deep model on density
    assert answers["boom_best_deep_model"] == "EGNN"
    assert answers["boom_best_deep_ood_rmse"] == pytest.approx(0.0279)
    assert answers["boom_random_forest_ood_rmse"] == pytest.approx(0.1815)
    curves = f"benchml-learning-curves-{TASK}"
    for stem in ("benchml-rmse", "benchml-ratio", curves, "benchml-slopes"):
        assert (out / f"{stem}.png").read_bytes()[:8] == PNG_MAGIC


def test_boom_best_deep_model_leaves_out_the_descriptor_models() -> None:
    paper = pd.DataFrame(
        [
            ("Random Forest", "t", "OOD", 1.0),
            ("Chemprop", "t", "OOD", 2.0),
            ("MACE", "t", "OOD", 2.2),
            ("Chemprop", "t", "ID", 0.1),
            ("EGNN", "t", "OOD", None),
        ],
        columns=["model", "task", "set", "rmse"],
    )
    best = boom_best_deep(paper).iloc[0]
    assert best["boom_best_deep_model"] == "Chemprop"
    assert best["boom_best_deep_ood_rmse"] == pytest.approx(2.0)
    assert best["boom_random_forest_ood_rmse"] == pytest.approx(1.0)
    assert pd.isna(best["boom_mlp_ood_rmse"])


def test_a_folder_without_benchml_runs_is_an_error(tmp_path: Path, capsys) -> None:
    run_folder(tmp_path / "runs" / "x", {"task": TASK, "model": "chemprop", "split": "ood"})
    assert benchml([str(tmp_path / "runs"), "--out", str(tmp_path / "out")]) == 2
    assert "no complete run of a BenchML regressor" in capsys.readouterr().err
