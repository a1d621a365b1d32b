"""Training weights end to end (`weighting=tails`): the training mean under the weights
is the weighted mean computed here from the split's training targets, the record and the
leaderboard's label say the run was weighted, its key differs from the plain run's, a
neural model trains on weighted draws, and a weighted kernel model's checkpoint whose
per-molecule noise is not a tensor is refused in one line."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from e2e_helpers import MLP, QUIET, TinyTask, ends_in_one_line, load_tiny_split

from oodmol.data.weighting import TailWeights
from oodmol.report.collect import model_label

WEIGHTED = ["weighting=tails", "weighting.exponent=2"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):
    task = TinyTask.create(tmp_path_factory.mktemp("weighting"))
    yield task
    task.close()


def test_the_weighted_mean_leans_on_the_ends_of_the_training_range(tiny: TinyTask) -> None:
    weighted, plain = tiny.root / "weighted", tiny.root / "plain"
    args = ["train.py", *tiny.task_args(), *QUIET, "model=mean"]
    tiny.submit("weighted", [*args, *WEIGHTED, f"hydra.run.dir={weighted}"])
    tiny.submit("plain", [*args, f"hydra.run.dir={plain}"])
    tiny.result("weighted").ok()
    tiny.result("plain").ok()
    data, split = load_tiny_split(tiny)
    train = data.y[data.table.rows_of(split.sets["train"])]
    expected = np.average(train, weights=TailWeights(exponent=2)(train))
    assert abs(expected - train.mean()) > 1e-3  # the weights move the mean
    predictions = pd.read_csv(weighted / "predictions.csv")
    np.testing.assert_allclose(predictions["y_pred"], expected, rtol=1e-6)
    record = json.loads((weighted / "metrics.json").read_text())
    facts = record["data"]["weighting"]
    assert (facts["name"], facts["exponent"]) == ("tails", 2.0)
    assert facts["effective_molecules"] < len(train)
    assert record["config_key"] != json.loads((plain / "metrics.json").read_text())["config_key"]
    assert model_label(record) == "mean (weighting=tails)"


def test_a_neural_model_trains_on_weighted_draws(tiny: TinyTask) -> None:
    run = tiny.root / "mlp"
    tiny.run(["train.py", *tiny.task_args(), *QUIET, *MLP, *WEIGHTED, f"hydra.run.dir={run}"]).ok()
    record = json.loads((run / "metrics.json").read_text())
    assert record["data"]["weighting"]["name"] == "tails"
    assert np.isfinite(record["ood"]["rmse"])


def test_a_weighted_kernel_checkpoint_with_a_bad_noise_entry_is_refused_in_one_line(
    tiny: TinyTask,
) -> None:
    import torch

    run = tiny.root / "gp"
    args = [*tiny.task_args(), *QUIET, "model=gp_rbf", *WEIGHTED, f"hydra.run.dir={run}"]
    tiny.run(["train.py", *args]).ok()
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert torch.is_tensor(checkpoint["kernel_regression"]["noise"])  # a dual fit's α/w
    checkpoint["kernel_regression"]["noise"] = [1.0, 2.0]
    tampered = tiny.root / "tampered.ckpt"
    torch.save(checkpoint, tampered)
    result = tiny.run(["evaluate.py", f"ckpt_path={tampered}", *QUIET])
    last = ends_in_one_line(result, 2)
    assert last == f"[oodmol evaluate] {tampered}: the kernel model's 'noise' is not a tensor"
