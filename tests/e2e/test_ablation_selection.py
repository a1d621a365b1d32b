"""`oodmol ablation selection`: known answers from synthetic search trials, and the whole
experiment (a tiny experiment=selection search, then the table) through the command lines."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from e2e_helpers import QUIET, TinyTask
from run_folders import PNG_MAGIC, run_folder

from oodmol.cli.ablation import selection


def _trial(root: Path, name: str, task: str, id_val: float, tail: float | None, ood: float):
    sets = {"val": {"best_loss": id_val}}
    if tail is not None:
        sets["val_tail"] = {"best_loss": tail}
    metrics = {
        "task": task,
        "model": "chemprop",
        "id": {"rmse": 0.1},
        "ood": {"rmse": ood, "n": 9},
        "validation": {"selected_on": "val_tail", "sets": sets},
    }
    run_folder(root / task / name, metrics)


def test_three_selections_and_the_share_recovered(tmp_path: Path, capsys) -> None:
    runs = tmp_path / "runs"
    # task t: ID validation picks d0 (OOD 3), tail validation d1 (OOD 2), the test d2 (OOD 1)
    _trial(runs, "d0", "t", id_val=1.0, tail=5.0, ood=3.0)
    _trial(runs, "d1", "t", id_val=2.0, tail=1.0, ood=2.0)
    _trial(runs, "d2", "t", id_val=3.0, tail=2.0, ood=1.0)
    _trial(runs, "d3", "t", id_val=0.5, tail=None, ood=0.5)  # no tail score: not a draw
    # task u: ID validation already picks the test's choice; nothing to recover
    _trial(runs, "d0", "u", id_val=1.0, tail=2.0, ood=1.0)
    _trial(runs, "d1", "u", id_val=2.0, tail=1.0, ood=4.0)
    assert selection([str(runs), "--out", str(tmp_path / "out")]) == 0
    table = pd.read_csv(tmp_path / "out" / "selection.csv")
    t, u = table.iloc[0], table.iloc[1]
    assert (t["task"], t["draws"], u["draws"]) == ("t", 3, 2)
    assert [t[f"{r}_run"] for r in ("id_val", "tail_val", "ood_test")] == ["t/d0", "t/d1", "t/d2"]
    np.testing.assert_allclose(
        [t["id_val_ood_rmse"], t["tail_val_ood_rmse"], t["ood_test_ood_rmse"]], [3.0, 2.0, 1.0]
    )
    assert t["test_selected_gain"] == pytest.approx(2.0)
    assert t["tail_recovered_share"] == pytest.approx(0.5)
    assert u["test_selected_gain"] == 0.0 and np.isnan(u["tail_recovered_share"])
    assert u["tail_val_ood_rmse"] == 4.0  # worse than ID validation's pick
    assert (tmp_path / "out" / "selection.png").read_bytes()[:8] == PNG_MAGIC
    svg = (tmp_path / "out" / "selection.svg").read_text()
    assert "leaks the test set" in svg
    assert "t/d1" in capsys.readouterr().out  # the table is printed too


def test_runs_without_both_validation_sets_are_an_error(tmp_path: Path, capsys) -> None:
    _trial(tmp_path / "runs", "d0", "t", id_val=1.0, tail=None, ood=1.0)
    assert selection([str(tmp_path / "runs"), "--out", str(tmp_path / "o")]) == 2
    assert "no complete run scored both validation sets" in capsys.readouterr().err


@pytest.mark.slow
def test_selection_experiment_end_to_end(tmp_path: Path) -> None:
    """Three tiny Chemprop draws of experiment=selection: every trial is tested, records
    both validation sets, and its objective is the tail set's best loss; then the table."""
    task = TinyTask.create(tmp_path, workers=1)
    search = tmp_path / "search"
    try:
        task.run(
            [
                "train.py", "-m", "experiment=selection", *task.task_args(), *QUIET,
                "hydra.sweeper.n_trials=3", "model.max_epochs=2",
                "model.hidden=range(16, 48, step=16)", f"hydra.sweep.dir={search}",
            ]
        ).ok()  # fmt: skip
        figure = task.run(
            ["-m", "oodmol.cli", "ablation", "selection", str(search), "--out", str(tmp_path)]
        )
        figure.ok()
    finally:
        task.close()
    for trial in ("0", "1", "2"):
        metrics = json.loads((search / trial / "metrics.json").read_text())
        sets = metrics["validation"]["sets"]
        assert metrics["validation"]["selected_on"] == "val_tail"
        assert metrics["objective"]["value"] == sets["val_tail"]["best_loss"]
        assert metrics["training"]["tested_epoch"] == sets["val_tail"]["best_epoch"]
        assert sets["val"]["best_loss"] > 0 and metrics["ood"]["n"] == 20
        assert metrics["data"]["sizes"]["val_tail"] == metrics["data"]["sizes"]["val"]
    table = pd.read_csv(tmp_path / "selection.csv")
    assert table["draws"].tolist() == [3]
    assert (
        table["ood_test_ood_rmse"][0]
        <= table[["id_val_ood_rmse", "tail_val_ood_rmse"]].min(axis=1)[0]
    )
