"""train.py with model=chemprop on a tiny CSV task, and a 2-trial Chemprop random search.

Both runs start together in the background (see e2e_helpers.TinyTask); model=tgnn shares
every step but its backbone, which tests/unit/models/test_graph_models.py covers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
import yaml
from e2e_helpers import QUIET, TinyTask, scored_rows

pytestmark = pytest.mark.slow

CHEMPROP = ["model=chemprop", "model.hidden=32", "model.max_epochs=1"]
SEARCH = [
    "-m",
    "hparams_search=chemprop_random",
    "hydra.sweeper.n_trials=2",
    "model.max_epochs=2",
    "model.hidden=range(16, 48, step=16)",  # tiny widths instead of 300-2400
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TinyTask]:
    task = TinyTask.create(tmp_path_factory.mktemp("graphs"))
    for name, args in (("chemprop", CHEMPROP), ("search", SEARCH)):
        task.notes[name] = out = task.root / name
        folder = "hydra.sweep.dir" if name == "search" else "hydra.run.dir"
        task.submit(name, ["train.py", *args, *task.task_args(), *QUIET, f"{folder}={out}"])
    yield task
    task.close()


def test_chemprop_trains_and_scores_id_and_ood(tiny):
    tiny.result("chemprop").ok()
    out: Path = tiny.notes["chemprop"]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["model"] == "chemprop" and metrics["data"]["atom_dim"] == 72
    predictions = scored_rows(pd.read_csv(out / "predictions.csv"))
    assert sorted(predictions["set"].unique()) == ["id", "ood"]
    assert predictions["y_pred"].notna().all()


def test_random_search_selects_on_validation_loss(tiny):
    tiny.result("search").ok()
    out: Path = tiny.notes["search"]
    result = yaml.safe_load((out / "optimization_results.yaml").read_text())
    assert set(result["best_params"]) == {
        "model.depth",
        "model.dropout",
        "model.ffn_layers",
        "model.hidden",
    }
    assert 0 < result["best_value"] < 10
    for trial in ("0", "1"):
        assert (out / trial / "checkpoints" / "best.ckpt").is_file()
        metrics = json.loads((out / trial / "metrics.json").read_text())
        assert metrics["objective"]["name"] == "val_loss"
        assert not {"id", "ood"} & set(metrics)  # trials never see a test set
