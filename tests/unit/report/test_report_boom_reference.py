"""BOOM's published numbers as shipped: the same as the tables typed from the paper (with
the known defect handled), and put beside our runs only where they are the same
experiment."""

from __future__ import annotations

import csv
import math
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from paths import REPO

from oodmol.report.boom_reference import boom_paper, compare, ratio
from oodmol.report.tables import label_benchmarks, summarize
from oodmol.report.web_tables import paper_models_table

ROOT = REPO


def _typed_tables() -> Path:
    """The CSVs the JSON was made from (the shared folder beside the data)."""
    candidates = [ROOT.parent / "shared" / "boom_paper"]
    if os.environ.get("OODMOL_SOURCE_DIR"):
        candidates.append(Path(os.environ["OODMOL_SOURCE_DIR"]).parent / "boom_paper")
    for folder in candidates:
        if (folder / "table7_rmse.csv").is_file():
            return folder
    pytest.skip("BOOM's typed tables (shared/boom_paper) are not on this machine")


@pytest.mark.slow  # starts a Python process
def test_shipped_file_is_what_the_script_makes_from_the_typed_tables(tmp_path: Path) -> None:
    source = _typed_tables()
    out = tmp_path / "boom_paper.json"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "boom_paper_json.py"),
            str(source),
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    shipped = ROOT / "src" / "oodmol" / "report" / "boom_paper.json"
    assert out.read_text() == shipped.read_text()


def test_every_printed_rmse_is_shipped_but_graphormers_copied_ood_row() -> None:
    table7 = boom_paper().tables["table7"].set_index(["paper_model", "set", "task"])["rmse"]
    with (_typed_tables() / "table7_rmse.csv").open(newline="") as handle:
        printed = list(csv.DictReader(handle))
    assert len(printed) == len(table7)
    for row in printed:
        value = table7[(row["model"], row["set"], row["task"])]
        if row["model"] == "Graphormer" and row["set"] == "OOD":
            assert math.isnan(value)
        else:
            assert value == float(row["rmse"])
    assert boom_paper().citation.startswith("E. R. Antoniuk")


def _runs() -> pd.DataFrame:
    """rf plain (two seeds), on a subset, with a uq method and on a random split."""
    rows = []
    for model, label_suffix, split, seed in (
        ("rf", "", "ood", 0),
        ("rf", "", "ood", 1),
        ("rf", " [subset]", "ood", 0),
        ("rf", "+ensemble", "ood", 0),
        ("rf", "", "random", 0),
    ):
        rows.append(
            {
                "task": "csd10k_density",
                "split": split,
                "split_hash": f"{split}-hash",
                "model": model + label_suffix,
                "model_name": model,
                "seed": seed,
                "id.rmse": 0.02 + 0.01 * seed,
                "ood.rmse": 0.3,
                "id.pearson_r2": 0.9,
                "ood.binned_pearson_r2": 0.2,
            }
        )
    return label_benchmarks(pd.DataFrame(rows))[0]


def test_paper_numbers_stand_beside_the_same_experiment_only() -> None:
    runs = _runs()
    cells = compare(summarize(runs), runs).set_index(["benchmark", "model", "metric", "set"])
    paper = boom_paper().tables
    table7 = paper["table7"].set_index(["model", "task", "set"])["rmse"]
    rf = cells.loc[("csd10k_density", "rf", "rmse", "ID")]
    assert rf["paper_mean"] == table7[("rf", "csd10k_density", "ID")]
    assert rf["ratio"] == pytest.approx(0.025 / rf["paper_mean"])
    assert rf["paper_table"] == "table7"
    r2 = cells.loc[("csd10k_density", "rf", "r2", "OOD")]
    table5 = paper["table5"].set_index(["model", "task", "set"])["r2"]
    table6 = paper["table6"].set_index(["model", "task", "set"])["r2_std"]
    assert r2["paper_mean"] == table5[("rf", "csd10k_density", "OOD")]
    assert r2["paper_std"] == table6[("rf", "csd10k_density", "OOD")]
    for label, benchmark in (
        ("rf [subset]", "csd10k_density"),
        ("rf+ensemble", "csd10k_density"),
        ("rf", "csd10k_density (random)"),
    ):
        other = cells.loc[(benchmark, label, "rmse", "ID")]
        assert math.isnan(other["paper_mean"]) and math.isnan(other["ratio"]), label


def test_a_ratio_needs_two_finite_numbers_and_a_positive_paper_value() -> None:
    assert ratio(0.5, 0.25) == 2.0
    assert math.isnan(ratio(0.5, -0.2))  # a ratio to a negative R² says nothing
    assert math.isnan(ratio(0.5, 0.0))
    assert math.isnan(ratio(math.nan, 0.3))


def test_the_papers_models_without_a_run_stand_beside_ours() -> None:
    """A folder of runs of models the paper does not have (BenchML's regressors): the
    paper's RMSE of each of its models on the folder's tasks, as printed (Table 7)."""
    comparison = pd.DataFrame({"task": ["csd10k_density"], "model_name": ["soap-krr_rbf"]})
    table = paper_models_table(comparison)
    rows = {(r[0].text, r[1].text): r[2].text for r, _ in table.rows}
    assert rows[("egnn", "OOD")] == "0.0279" and rows[("rf", "ID")] == "0.0248"
    with_rf = pd.DataFrame({"task": ["csd10k_density"], "model_name": ["rf"]})
    assert ("rf", "ID") not in {(r[0].text, r[1].text) for r, _ in paper_models_table(with_rf).rows}
    assert paper_models_table(pd.DataFrame({"task": ["mine"], "model_name": ["x"]})) is None
