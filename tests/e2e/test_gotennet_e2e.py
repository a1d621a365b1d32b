"""train.py with model=gotennet (a few channels) on the tiny CSV task: conformers are
generated and cached, the model trains under its own schedule (warm-up, plateau decay,
gradient clipping) and its ID and OOD predictions are scored; once with the default
readout (the task's mean) and once with an extensive task (sum)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pandas as pd
import pytest
from e2e_helpers import QUIET, TinyTask, scored_rows

pytestmark = pytest.mark.slow

TINY = ["hidden=8", "layers=2", "heads=2", "num_rbf=8", "output_hidden=8"]
RUNS = {"mean": [], "sum": ["task.extensive=true"]}


def command(task: TinyTask, run: str) -> list[str]:
    return [
        "train.py",
        "model=gotennet",
        *[f"model.module.backbone.{o}" for o in TINY],
        "model.max_epochs=2",
        "model.batch_size=32",
        *task.task_args(),
        *RUNS[run],
        *QUIET,
        f"hydra.run.dir={task.root / run}",
    ]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TinyTask]:
    task = TinyTask.create(tmp_path_factory.mktemp("gotennet"))
    # one after the other: the first run builds the conformer cache, the second reads it
    task.submit_chain(*((run, lambda run=run: task.run(command(task, run))) for run in RUNS))
    yield task
    task.close()


@pytest.mark.parametrize("run", list(RUNS))
def test_gotennet_trains_and_scores_id_and_ood(tiny, run):
    tiny.result(run).ok()
    out = tiny.root / run
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["model"] == "gotennet"
    assert metrics["status"] == "complete"
    predictions = scored_rows(pd.read_csv(out / "predictions.csv"))
    assert sorted(predictions["set"].unique()) == ["id", "ood"]
    assert predictions["y_pred"].notna().all()
