"""`oodmol reproduce`: our runs under both protocols beside BOOM's published numbers,
with known answers for the table and an end-to-end run that trains what is missing and
reuses it afterwards."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from e2e_helpers import MLP, QUIET, TinyTask

from oodmol.apps.reproduce import plan
from oodmol.report.reproduction import PaperTables, reproduction_table, within_spread


@pytest.fixture
def paper() -> PaperTables:
    """BOOM's values for the tests' model and tasks, in PaperTables' long layout."""
    rows = [
        ("mlp", "ID", "lipophilicity", "rmse", 0.866, 0.09),
        ("mlp", "OOD", "lipophilicity", "rmse", 2.041, 0.2),
        ("mlp", "OOD", "csd10k_density", "rmse", 0.09, math.nan),
    ]
    columns = ["model", "set", "task", "metric", "value", "sd"]
    return PaperTables(pd.DataFrame(rows, columns=columns))


def test_shipped_tables_hold_table9_spreads_and_table5_6_r2() -> None:
    paper = PaperTables.shipped()
    assert paper.lookup("mlp", "OOD", "lipophilicity", "rmse") == (2.041, 0.2)
    value, sd = paper.lookup("mlp", "OOD", "csd10k_density", "rmse")
    assert value == 0.0941 and math.isnan(sd)  # Table 7 publishes no spread
    assert paper.lookup("rf", "ID", "csd10k_density", "r2") == (0.912, 0.002)
    assert all(math.isnan(v) for v in paper.lookup("rf", "ID", "lipophilicity", "r2"))


def test_within_spread_known_answers() -> None:
    assert within_spread(1.2, 2.041, 0.2) == (pytest.approx(-4.205), False)
    assert within_spread(2.0, 2.041, 0.2) == (pytest.approx(-0.205), True)
    assert within_spread(2.441, 2.041, 0.2)[1] is True  # exactly 2 sd: inside
    z, within = within_spread(0.1, 0.09, math.nan)
    assert math.isnan(z) and within is None


def run_rows(protocol: str, task: str, rmse_ood: list[float]) -> list[dict]:
    return [
        {
            "model_name": "mlp",
            "task": task,
            "protocol": protocol,
            "seed": seed,
            "id.rmse": 0.5,
            "ood.rmse": value,
            "id.pearson_r2": 0.9,
            "ood.binned_pearson_r2": 0.2,
        }
        for seed, value in enumerate(rmse_ood)
    ]


def test_reproduction_table_known_answers(paper: PaperTables) -> None:
    runs = pd.DataFrame(
        run_rows("boom", "lipophilicity", [1.0, 1.2, 1.4])
        + run_rows("default", "lipophilicity", [2.0, 2.1])
    )
    table = reproduction_table(runs, paper).set_index(["set", "metric"])
    ood = table.loc[("OOD", "rmse")]
    assert (ood["boom_mean"], ood["boom_sd"], ood["boom_n"]) == (
        pytest.approx(1.2),
        pytest.approx(0.2),
        3,
    )
    assert (ood["default_mean"], ood["default_n"]) == (pytest.approx(2.05), 2)
    assert (ood["paper"], ood["paper_sd"]) == (2.041, 0.2)
    assert ood["boom_z"] == pytest.approx((1.2 - 2.041) / 0.2) and not ood["boom_within"]
    assert ood["default_z"] == pytest.approx((2.05 - 2.041) / 0.2) and ood["default_within"]
    # Lipophilicity has no R² in the paper: ours is shown, no verdict is made up
    assert np.isnan(table.loc[("ID", "r2"), "paper"])
    assert table.loc[("ID", "r2"), "boom_within"] is None


def test_qm9_tasks_go_to_the_models_a_cpu_trains_on_them() -> None:
    tasks = ["qm9_homo", "lipophilicity"]
    cells = plan(["rf", "chemprop", "egnn"], tasks, ["csd10k_hof"], [0, 1], [0], ["boom"])
    runs = {(c.model, c.task, c.seed) for c in cells}
    assert runs == {
        ("rf", "qm9_homo", 0),
        ("rf", "qm9_homo", 1),
        ("rf", "lipophilicity", 0),
        ("rf", "lipophilicity", 1),
        ("chemprop", "lipophilicity", 0),
        ("chemprop", "lipophilicity", 1),
        ("egnn", "csd10k_hof", 0),
    }
    assert {c.task_name for c in cells if c.task == "qm9_homo"} == {"qm9_homo"}
    widened = plan(["chemprop"], tasks, [], [0], [0], ["boom"], qm9_models=["chemprop"])
    assert [c.task for c in widened] == tasks


@pytest.mark.slow
def test_reproduce_trains_what_is_missing_then_reuses_it(tmp_path) -> None:
    task = TinyTask.create(tmp_path)
    try:
        runs = tmp_path / "runs"
        common = [
            "-m",
            "oodmol.cli",
            "reproduce",
            str(runs),
            "--models=mlp",
            "--tasks=csv",
            "--protocols=boom,default",
            *task.task_args()[1:],
            *MLP[1:],
            *QUIET,
        ]
        first = task.run([*common, "--seeds=0", "--run", f"--out={tmp_path / 'table'}"]).ok()
        assert "2 runs planned: 0 found, 2 missing" in first.stdout
        assert first.stdout.count("training model=mlp") == 2
        table = pd.read_csv(tmp_path / "table" / "reproduction.csv")
        assert set(table["task"]) == {"tiny"}
        assert (table["boom_n"] == 1).all() and (table["default_n"] == 1).all()
        assert np.isfinite(table["boom_mean"]).all() and np.isfinite(table["default_mean"]).all()
        assert "| mlp | tiny | OOD | RMSE |" in (tmp_path / "table" / "reproduction.md").read_text()

        again = task.run([*common, "--seeds=0"]).ok()
        assert "2 runs planned: 2 found, 0 missing" in again.stdout
        assert "training" not in again.stdout
        # a run stopped after its last checkpoint (no metrics.json yet) is finished, not
        # refused: --run resumes it
        (metrics,) = [p for p in runs.rglob("metrics.json") if "/tiny/ood/mlp/" in str(p)][:1]
        metrics.unlink()
        resumed = task.run([*common, "--seeds=0", "--run"]).ok()
        assert "2 runs planned: 1 found, 1 missing" in resumed.stdout
        assert metrics.is_file()
        assert json.loads(metrics.read_text())["training"]["resumed"] is True
        # another budget is another configuration: nothing on disk stands in for it
        other = task.run([*common, "--seeds=0", "model.max_epochs=3"])
        assert other.returncode == 2
        assert "2 runs planned: 0 found, 2 missing" in other.stdout
    finally:
        task.close()
