"""BenchML's regressors end to end on the tiny task, through the command lines: a GP on
SOAP (conformers, 3D cache, search, σ), its checkpoint scored again and used for new
molecules (weights-only), a discovery campaign acquiring on its σ, a sweep of
experiment=benchml's kind, and `oodmol ablation benchml` on the runs."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from e2e_helpers import QUIET, TinyTask

pytestmark = pytest.mark.slow

GP_SOAP = ["model=gp_rbf", "model/representation=soap", "model.module.folds=3"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):
    task = TinyTask.create(tmp_path_factory.mktemp("benchml"))
    runs = task.root / "runs"
    task.notes["runs"] = runs
    train = ["train.py", *task.task_args(), *QUIET, f"paths.log_dir={runs}"]
    task.submit("gp", [*train, *GP_SOAP])
    sweep = ["train.py", "-m", *train[1:], f"hydra.sweep.dir={runs}", "model=ridge,krr_tanimoto"]
    # a single representation for two swept models, as a user writes it
    task.submit("sweep", [*sweep, "model/representation=ecfp4"])
    campaign = ["-m", "oodmol.cli", "campaign", *task.task_args(), *QUIET, *GP_SOAP]
    task.submit("campaign", [*campaign, "acquisition=ucb", "rounds=1", "batch=3",
                             f"out={task.root / 'campaign'}"])  # fmt: skip
    yield task
    task.close()


def run_folder(runs: Path, model: str) -> Path:
    (metrics,) = [p for p in runs.rglob("metrics.json") if f"/{model}/" in str(p)]
    return metrics.parent


def test_a_gp_on_soap_records_its_search_and_sigma(tiny) -> None:
    tiny.result("gp").ok()
    folder = run_folder(tiny.notes["runs"], "soap-gp_rbf")
    metrics = json.loads((folder / "metrics.json").read_text())
    search = metrics["fit"]["search"]
    assert metrics["model"] == "soap-gp_rbf" and metrics["fit"]["method"] == "gp"
    assert search["folds"] == 3 and len(search["cv_rmse"]) == 4 and len(search["alphas"]) == 17
    assert metrics["uq"]["method"] == "native" and "nll" in metrics["uq"]["ood"]["total"]
    predictions = pd.read_csv(folder / "predictions.csv")
    assert (predictions["y_std"] > 0).all() and "y_std_epistemic" in predictions
    # the checkpoint, scored again from itself alone (weights-only), gives the same numbers
    out = tiny.root / "rescored"
    checkpoint = folder / "checkpoints" / "best.ckpt"
    tiny.run(["evaluate.py", f"ckpt_path={checkpoint}", f"hydra.run.dir={out}", *QUIET]).ok()
    rescored = json.loads((out / "metrics.json").read_text())
    assert rescored["ood"]["rmse"] == pytest.approx(metrics["ood"]["rmse"], rel=1e-6)
    assert rescored["fit"] == metrics["fit"]
    new = tiny.root / "new.csv"
    new.write_text("smiles\nc1ccccc1CCO\nCCOC(=O)c1ccccc1\n")
    predicted = tiny.root / "predicted.csv"
    tiny.run(["-m", "oodmol.cli", "predict", f"ckpt_path={checkpoint}", f"input={new}",
              f"out={predicted}", *QUIET]).ok()  # fmt: skip
    assert (pd.read_csv(predicted)["y_std"] > 0).all()


def test_a_campaign_acquires_on_the_gps_sigma(tiny) -> None:
    tiny.result("campaign").ok()
    (record,) = (tiny.root / "campaign").rglob("rounds/0.json")
    acquired = json.loads(record.read_text())["acquired"]
    assert len(acquired) == 3 and all(m["y_std"] > 0 for m in acquired)


def test_a_sweep_and_the_benchml_figures(tiny) -> None:
    tiny.result("sweep").ok()
    tiny.result("gp").ok()
    out = tiny.root / "figures"
    result = tiny.run(["-m", "oodmol.cli", "ablation", "benchml", str(tiny.notes["runs"]),
                       "--out", str(out)])  # fmt: skip
    result.ok()
    table = pd.read_csv(out / "benchml-rmse.csv")
    assert set(table["representation"] + "-" + table["regressor"]) == {
        "soap-gp_rbf",
        "ecfp4-ridge",
        "ecfp4-krr_tanimoto",
    }
    assert (out / "benchml-answers.csv").is_file()
