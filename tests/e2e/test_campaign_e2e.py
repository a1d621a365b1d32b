"""`oodmol campaign` end to end on the tiny task, through the command line: rounds that
train on what was acquired and are scored on what remains of the pool, acquisitions that
follow the rule from the round's own predictions, labels and recall that match the data,
a resume after an interruption that redoes nothing and ends as the uninterrupted campaign
did, refusals, and the report."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from e2e_helpers import MLP, MORGAN, QUIET, Result, TinyTask
from omegaconf import OmegaConf

pytestmark = pytest.mark.slow

ENSEMBLE = ["uq=ensemble", "uq.members=2"]
RF = ["model=rf", "model.module.n_estimators=10", *MORGAN]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):
    task = TinyTask.create(tmp_path_factory.mktemp("campaign"))
    ucb, ei = task.root / "ucb", task.root / "ei"
    task.notes.update(ucb=ucb, ei=ei, finished=task.root / "ucb-finished")

    def campaign(*arguments: str) -> list[str]:
        return ["-m", "oodmol.cli", "campaign", *task.task_args(), *QUIET, *arguments]

    ucb_args = campaign(*MLP, *ENSEMBLE, "acquisition=ucb", "rounds=2", "batch=3",
                        "top_fraction=0.1", f"out={ucb}")  # fmt: skip

    def snapshot() -> Result:
        """The finished campaign as it was, for the tests that read it."""
        task.notes["records"] = [(ucb / "rounds" / f"{r}.json").read_text() for r in (0, 1)]
        task.notes["round0_mtimes"] = _mtimes(ucb / "rounds" / "0")
        shutil.copytree(ucb, task.notes["finished"])
        return Result(["snapshot"], 0, "", "")

    def interrupted() -> Result:
        """Round 1 cut short: its second member killed after its last checkpoint, before
        testing; no combination, no record. Then the same command again."""
        for name in ("1.json", "1/metrics.json", "1/predictions.csv",
                     "1/members/1/metrics.json", "1/members/1/predictions.csv"):  # fmt: skip
            (ucb / "rounds" / name).unlink()
        (ucb / "summary.csv").unlink()
        return task.run(ucb_args)

    def report() -> Result:
        task.result("ei")  # both campaigns done
        return task.run(["-m", "oodmol.cli", "campaign-report", str(ucb), str(ei),
                         "--out", str(task.root / "figure")])  # fmt: skip

    other = campaign(*MLP, *ENSEMBLE, "acquisition=ucb", "rounds=2", "batch=4", f"out={ucb}")
    task.submit("ei", campaign(*RF, "acquisition=ei", "direction=both", "rounds=2", "batch=4",
                               f"out={ei}"))  # fmt: skip
    task.submit_chain(
        ("ucb", ucb_args),
        ("snapshot", snapshot),
        ("interrupted", interrupted),
        ("again", ucb_args),
        ("other", other),
        ("report", report),
    )
    task.submit("no_sigma", campaign(*MLP, "acquisition=ei", "rounds=1", "batch=2"))
    task.submit("subset", campaign(*MLP, "acquisition=ei", "rounds=1", "batch=2",
                                   "max_molecules=64"))  # fmt: skip
    yield task
    task.close()


def _mtimes(folder: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


def _records(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((folder / "rounds").glob("*.json"))]


def _ood(run: Path) -> pd.DataFrame:
    predictions = pd.read_csv(run / "predictions.csv")
    return predictions[predictions["set"] == "ood"]


def test_each_round_trains_on_the_acquired_and_is_scored_on_the_rest(tiny) -> None:
    tiny.result("ucb").ok()
    tiny.result("snapshot").ok()
    folder = tiny.notes["finished"]  # the campaign goes on being interrupted meanwhile
    labels = dict(enumerate(tiny.molecules["y"]))  # CSV row k is mol id k
    pool = json.loads((folder / "pool.json").read_text())
    assert len(pool["mol_id"]) == 20  # the tiny task's OOD set
    assert [labels[i] for i in pool["mol_id"]] == pool["y_true"]
    # the top 10 % of the pool by value, from the data
    ranked = sorted(pool["mol_id"], key=lambda i: (-labels[i], i))
    assert pool["top"] == sorted(ranked[: math.ceil(0.1 * 20)])
    records = _records(folder)
    acquired: list[int] = []
    for r, record in enumerate(records):
        run = folder / "rounds" / str(r)
        config = OmegaConf.load(run / ".hydra" / "config.yaml")
        assert sorted(config.split.acquired) == sorted(acquired)
        scored = _ood(run)
        assert sorted(scored["mol_id"]) == sorted(set(pool["mol_id"]) - set(acquired))
        metrics = json.loads((run / "metrics.json").read_text())
        assert record["ood_rmse"] == pytest.approx(metrics["ood"]["rmse"], rel=1e-9)
        # UCB from the round's own predictions: the three highest μ + 2σ, labels revealed
        ucb = scored["y_pred"] + 2.0 * scored["y_std"]
        order = np.lexsort((scored["mol_id"], -ucb.to_numpy()))
        batch = [m["mol_id"] for m in record["acquired"]]
        assert batch == scored["mol_id"].to_numpy()[order[:3]].tolist()
        assert [m["y_true"] for m in record["acquired"]] == [labels[i] for i in batch]
        acquired += batch
        hits = len(set(pool["top"]) & set(acquired))
        assert (record["n_acquired"], record["n_top_found"]) == (len(acquired), hits)
        assert record["recall"] == hits / 2
        assert record["best_found"] == max(labels[i] for i in acquired)
    summary = pd.read_csv(folder / "summary.csv")
    assert summary["n_acquired"].tolist() == [3, 6]


def test_an_interrupted_campaign_goes_on_without_redoing_or_losing_a_round(tiny) -> None:
    result = tiny.result("interrupted").ok()
    folder = tiny.notes["ucb"]
    assert "round 0: training" not in result.stdout  # round 0 was recorded: not touched
    assert _mtimes(folder / "rounds" / "0") == tiny.notes["round0_mtimes"]
    # round 1 went on: member 0 reused, member 1 resumed from its last checkpoint
    assert "members/0 already holds this run" in result.stdout
    member = json.loads((folder / "rounds/1/members/1/metrics.json").read_text())
    assert member["training"]["resumed"] and member["training"]["attempts"] == 2
    # and ends as the uninterrupted campaign did
    assert [p.read_text() for p in sorted((folder / "rounds").glob("*.json"))] == tiny.notes[
        "records"
    ]
    again = tiny.result("again").ok()
    assert "2 rounds recorded" in again.stdout and "training with" not in again.stdout


def test_a_folder_of_another_campaign_and_bad_arguments_are_refused(tiny) -> None:
    other = tiny.result("other")
    assert other.returncode == 2 and "holds another campaign" in other.stderr
    subset = tiny.result("subset")
    assert subset.returncode == 2 and "split.max_per_set" in subset.stderr


def test_a_rule_that_needs_sigma_stops_when_the_model_has_none(tiny) -> None:
    result = tiny.result("no_sigma")
    assert result.returncode == 2 and "needs a predictive σ" in result.stderr
    # the default folder: runs/campaigns/<task>/<model>/<rule>/<key>/<seed>
    (folder,) = (tiny.root / "project" / "runs" / "campaigns" / "tiny" / "mlp" / "ei").glob("*/0")
    assert (folder / "rounds" / "0" / "metrics.json").is_file()
    assert not (folder / "rounds" / "0.json").exists()


def test_both_tails_with_the_forests_sigma_and_the_report(tiny) -> None:
    tiny.result("ei").ok()
    folder = tiny.notes["ei"]
    pool = json.loads((folder / "pool.json").read_text())
    distance = {
        i: abs(y - pool["centre"]) for i, y in zip(pool["mol_id"], pool["y_true"], strict=True)
    }
    ranked = sorted(pool["mol_id"], key=lambda i: (-distance[i], i))
    assert pool["top"] == [ranked[0]]  # 1 % of 20: one molecule, the farthest
    records = _records(folder)
    assert [r["n_acquired"] for r in records] == [4, 8]
    assert all(m["y_std"] > 0 for r in records for m in r["acquired"])  # trees' spread
    tiny.result("report").ok()
    table = pd.read_csv(tiny.root / "figure" / "campaigns.csv")
    assert sorted(zip(table["acquisition"], table["round"], strict=True)) == [
        ("ei", 0), ("ei", 1), ("ucb", 0), ("ucb", 1)
    ]  # fmt: skip
    ucb = _records(tiny.notes["finished"])
    assert table.query("acquisition == 'ucb'")["recall_mean"].tolist() == [r["recall"] for r in ucb]
    assert (tiny.root / "figure" / "campaigns.png").stat().st_size > 0
