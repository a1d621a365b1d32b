"""protocol=boom beside oodmol's default: BOOM trains on the whole pool (no validation
hold-out) and tests the last epoch; the ID and OOD molecules are those of the default
protocol; per-model BOOM choices follow the model's own BOOM script."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from e2e_helpers import MLP, QUIET, TinyTask

from oodmol.config import compose_config
from oodmol.report.collect import collect_runs

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory):
    task = TinyTask.create(tmp_path_factory.mktemp("protocols"))
    for protocol in ("default", "boom"):
        folder = task.root / protocol
        command = ["train.py", *task.task_args(), *QUIET, *MLP, f"protocol={protocol}"]
        task.submit(protocol, [*command, f"hydra.run.dir={folder}"])
    yield task
    task.close()


def outputs(runs: TinyTask, protocol: str) -> tuple[dict, pd.DataFrame]:
    runs.result(protocol).ok()
    folder = runs.root / protocol
    metrics = json.loads((folder / "metrics.json").read_text())
    return metrics, pd.read_csv(folder / "predictions.csv")


def test_boom_trains_on_the_whole_pool_and_tests_the_same_molecules(runs: TinyTask) -> None:
    default, default_predictions = outputs(runs, "default")
    boom, boom_predictions = outputs(runs, "boom")
    ours, theirs = default["data"]["sizes_used"], boom["data"]["sizes_used"]
    assert theirs["val"] == 0 and theirs["train"] == ours["train"] + ours["val"]
    assert boom["data"]["sizes"] == default["data"]["sizes"]  # one split file
    for name in ("id", "ood"):
        a = default_predictions[default_predictions["set"] == name]["mol_id"]
        b = boom_predictions[boom_predictions["set"] == name]["mol_id"]
        assert sorted(a) == sorted(b), name
    assert set(boom_predictions["set"]) == {"id", "ood"}  # no validation set to predict


def test_boom_tests_the_last_epoch_and_records_it(runs: TinyTask) -> None:
    boom, _ = outputs(runs, "boom")
    training = boom["training"]
    assert training["protocol"] == "boom"
    assert (training["tested"], training["tested_epoch"]) == ("last", 1)  # 2 epochs
    assert training["validated_epochs"] == 0
    assert not (runs.root / "boom" / "checkpoints" / "best.ckpt").exists()
    log = pd.read_csv(runs.root / "boom" / "csv" / "metrics.csv")
    assert "val_loss" not in log


def test_default_tests_the_best_validation_epoch(runs: TinyTask) -> None:
    default, _ = outputs(runs, "default")
    training = default["training"]
    assert (training["protocol"], training["tested"]) == ("default", "best")
    assert training["tested_epoch"] in (0, 1) and isinstance(training["tested_is_last"], bool)
    assert default["config_key"] != outputs(runs, "boom")[0]["config_key"]


def test_per_model_boom_choices_follow_the_models_scripts() -> None:
    chemprop = compose_config("train", ["protocol=boom", "model=chemprop"])
    assert chemprop.protocol.holdout is True  # Chemprop's CLI validates and selects
    assert chemprop.callbacks.model_checkpoint.monitor == "val_loss"
    assert chemprop.model.module.backbone.aggregation == "mean"  # v1's aggregation
    assert compose_config("train", ["model=chemprop"]).model.module.backbone.aggregation == "norm"
    mlp = compose_config("train", ["protocol=boom", "model=mlp"])
    assert mlp.protocol.holdout is False and mlp.callbacks.model_checkpoint is None
    assert mlp.model.features.standardize is False  # BOOM's unscaled descriptors
    egnn = compose_config("train", ["protocol=boom", "model=egnn"])
    assert egnn.protocol.holdout is False and egnn.callbacks.model_checkpoint is None


def test_boom_runs_are_full_runs_in_a_column_of_their_own(runs: TinyTask) -> None:
    default, _ = outputs(runs, "default")
    boom, _ = outputs(runs, "boom")
    # its validation molecules trained, none were cut: no [subset]; both runs are
    # [shortened] by the tiny budget the tests give them
    assert boom["flags"] == default["flags"] == ["shortened"]
    labels = set(collect_runs(runs.root).runs["model"])
    assert labels == {"mlp [shortened]", "mlp (protocol=boom) [shortened]"}
