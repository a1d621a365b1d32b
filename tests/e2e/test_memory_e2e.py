"""train.py's memory planner as a user meets it: a run whose training steps cannot fit its
memory is refused before training in one line (exit 2, no traceback, nothing written),
as is a memory_fraction that is no share; a run that fits trains and records what its
steps were sized at; and a test that runs out of device memory is tested again in
smaller batches, said once."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator

import numpy as np
import pandas as pd
import pytest
from e2e_helpers import MLP, QUIET, TinyTask, ends_in_one_line


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TinyTask]:
    task = TinyTask.create(tmp_path_factory.mktemp("memory"))

    def train(name: str, *args: str) -> list[str]:
        folder = task.root / name
        return ["train.py", *task.task_args(), *QUIET, *MLP, *args, f"hydra.run.dir={folder}"]

    task.submit("fits", train("fits"))
    task.submit("too_large", train("too_large", "memory_limit_mb=1"))
    task.submit("no_share", train("no_share", "memory_fraction=1.5"))
    # a device that runs out of memory on test batches of more than 10 molecules
    (task.root / "out_of_memory.py").write_text(OUT_OF_MEMORY)
    above = ["+callbacks.oom._target_=out_of_memory.OutOfMemoryAbove", "+callbacks.oom.most=10"]
    halved = train("halved", "eval_batch_size=64", *above)
    task.submit("halved", lambda: task.run(halved, env={"PYTHONPATH": str(task.root)}))
    task.submit("whole", train("whole", "eval_batch_size=64"))
    yield task
    task.close()


OUT_OF_MEMORY = textwrap.dedent(
    """
    import lightning as L
    import torch


    class OutOfMemoryAbove(L.Callback):
        def __init__(self, most: int) -> None:
            self.most = most

        def on_test_batch_start(self, trainer, pl_module, batch, *args) -> None:
            if len(batch) > self.most:
                raise torch.OutOfMemoryError(f"CUDA out of memory ({len(batch)} molecules)")
    """
)


def test_a_run_whose_training_steps_cannot_fit_is_refused_before_training(tiny: TinyTask):
    last = ends_in_one_line(tiny.result("too_large"), 2)
    assert "needs about" in last
    assert last.startswith("[oodmol train] model.batch_size=")
    assert "for its largest training step" in last
    assert "use a machine with more memory" in last
    assert not (tiny.root / "too_large" / "metrics.json").exists()
    assert not (tiny.root / "too_large" / "checkpoints").exists()


def test_a_memory_fraction_that_is_no_share_is_refused_in_one_line(tiny: TinyTask):
    assert "memory_fraction must be a share" in ends_in_one_line(tiny.result("no_share"), 2)


def test_a_run_that_fits_trains_and_records_its_plan(tiny: TinyTask):
    result = tiny.result("fits").ok()
    memory = json.loads((tiny.root / "fits" / "metrics.json").read_text())["memory"]
    assert 0 < memory["train_need_mb"] <= memory["budget_mb"] < memory["available_mb"]
    assert memory["train_batch"] == 64  # the MLP's own
    assert memory["train_batches_sized"] > 0
    assert memory["eval_batch"] <= memory["eval_batch_requested"]
    assert "memory: the largest training step needs about" in result.stdout + result.stderr


def test_a_test_that_runs_out_of_device_memory_is_tested_again_in_halved_batches(
    tiny: TinyTask,
):
    result = tiny.result("halved").ok()
    output = result.stdout + result.stderr
    said = [line for line in output.splitlines() if "ran out of memory" in line]
    assert len(said) == 1, result.output()
    assert "batches of 64 molecules: evaluated in batches of 8" in said[0]
    assert "Traceback" not in output
    tiny.result("whole").ok()
    halved = pd.read_csv(tiny.root / "halved" / "predictions.csv").sort_values("mol_id")
    whole = pd.read_csv(tiny.root / "whole" / "predictions.csv").sort_values("mol_id")
    assert list(halved["mol_id"]) == list(whole["mol_id"])  # each molecule once
    np.testing.assert_allclose(halved["y_pred"], whole["y_pred"], rtol=1e-5)
