"""Bilinear transduction end to end on the tiny task: it trains and writes the standard
record and predictions on descriptors and on ECFP4; its test predictions stay the same
when every test molecule's target is changed (anchors and pairs come from the training
set only); `evaluate.py` and `oodmol predict` from its checkpoint give its predictions."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from e2e_helpers import OOD_SIZE, QUIET, TinyTask

SMALL = [
    "model=transduction",
    "model.max_epochs=3",
    "model.batch_size=32",
    "model.module.hidden=32",
    "model.module.embedding=8",
    "split=random",  # a split that does not read the targets, so both runs share it
]


def task_args(csv, name: str) -> list[str]:
    return ["task=csv", f"task.path={csv}", "task.target_column=y",
            f"task.ood_size={OOD_SIZE}", f"++task.name={name}"]  # fmt: skip


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):
    task = TinyTask.create(tmp_path_factory.mktemp("transduction"))
    train = ["train.py", *SMALL, *QUIET]
    task.submit("descriptors", [*train, *task.task_args(), f"hydra.run.dir={task.root / 'run'}"])
    task.submit("ecfp4", [*train, *task.task_args(), "model/representation=ecfp4",
                          f"hydra.run.dir={task.root / 'ecfp4'}"])  # fmt: skip
    yield task
    task.close()


def test_it_trains_and_records_on_any_vector_representation(tiny: TinyTask) -> None:
    for name, folder in (("descriptors", "run"), ("ecfp4", "ecfp4")):
        tiny.result(name).ok()
        metrics = json.loads((tiny.root / folder / "metrics.json").read_text())
        assert metrics["model"] == f"{name}-transduction" and metrics["n_params"] > 0
        assert all(metrics[s]["rmse"] > 0 for s in ("id", "ood"))
        predictions = pd.read_csv(tiny.root / folder / "predictions.csv")
        assert {"id", "ood"} <= set(predictions["set"])
        assert np.isfinite(predictions["y_pred"]).all()


def test_test_targets_never_reach_a_prediction(tiny: TinyTask) -> None:
    tiny.result("descriptors").ok()
    predictions = pd.read_csv(tiny.root / "run" / "predictions.csv")
    tested = predictions[predictions["set"].isin(["id", "ood"])]
    changed = tiny.molecules.copy()
    changed.loc[tested["mol_id"], "y"] = 100.0 - changed.loc[tested["mol_id"], "y"]
    csv = tiny.root / "changed.csv"
    changed.to_csv(csv, index=False)
    out = tiny.root / "changed"
    command = ["train.py", *SMALL, *QUIET, *task_args(csv, "tiny_changed")]
    tiny.run([*command, f"hydra.run.dir={out}"]).ok()
    again = pd.read_csv(out / "predictions.csv").set_index("mol_id").loc[tested["mol_id"]]
    assert (again["y_true"].to_numpy() != tested["y_true"].to_numpy()).all()
    np.testing.assert_allclose(again["y_pred"], tested["y_pred"], rtol=1e-6)


def test_its_checkpoint_rescores_and_predicts_the_same(tiny: TinyTask) -> None:
    tiny.result("descriptors").ok()
    run = tiny.root / "run"
    checkpoint = run / "checkpoints" / "best.ckpt"
    rescored = tiny.root / "rescored"
    tiny.run(["evaluate.py", f"ckpt_path={checkpoint}", *QUIET, f"hydra.run.dir={rescored}"]).ok()
    predictions = pd.read_csv(run / "predictions.csv")
    again = pd.read_csv(rescored / "predictions.csv")
    np.testing.assert_allclose(again["y_pred"], predictions["y_pred"], rtol=1e-6)
    ood = predictions[predictions["set"] == "ood"].head(5)
    molecules, out = tiny.root / "new.csv", tiny.root / "predicted.csv"
    ood[["smiles"]].to_csv(molecules, index=False)
    predict = ["-m", "oodmol.cli", "predict", f"ckpt_path={checkpoint}", f"input={molecules}"]
    tiny.run([*predict, f"out={out}", "progress=false"]).ok()
    np.testing.assert_allclose(pd.read_csv(out)["y_pred"], ood["y_pred"], rtol=1e-6)
