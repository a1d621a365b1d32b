"""train.py with `max_molecules` on the tiny CSV task: a 3D model's run builds the
conformers of its subset alone, and a run on a larger subset adds only the molecules the
first one did not build."""

from __future__ import annotations

import json
from collections.abc import Iterator

import lmdb
import pandas as pd
import pytest
from e2e_helpers import N_MOLECULES, QUIET, TinyTask

from oodmol.data.store import META_KEY, FeatureStore

pytestmark = pytest.mark.slow

EGNN = ["model=egnn", "model.module.backbone.hidden=8", "model.module.backbone.layers=1"]
SETS = ("train", "val", "id", "ood")


def command(task: TinyTask, n: int) -> list[str]:
    out = task.root / f"egnn-{n}"
    args = [*EGNN, "model.max_epochs=1", *task.task_args(), *QUIET, f"max_molecules={n}"]
    return ["train.py", *args, f"hydra.run.dir={out}"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TinyTask]:
    task = TinyTask.create(tmp_path_factory.mktemp("subset_e2e"))
    task.submit_chain(("small", command(task, 5)), ("larger", command(task, 8)))
    yield task
    task.close()


def conformer_cache(task: TinyTask) -> FeatureStore:
    """The graph3d cache as it is now (the folder holds one)."""
    (path,) = (task.data_dir / "features").glob("*-graph3d-*.lmdb")
    env = lmdb.open(str(path), subdir=False, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            meta = json.loads(txn.get(META_KEY))
    finally:
        env.close()
    return FeatureStore(path, meta)


def used(task: TinyTask, n: int) -> set[int]:
    """The ID, OOD and validation molecules the run predicted."""
    predictions = pd.read_csv(task.root / f"egnn-{n}" / "predictions.csv")
    return set(predictions["mol_id"].tolist())


def sizes_used(task: TinyTask, n: int) -> dict[str, int]:
    metrics = json.loads((task.root / f"egnn-{n}" / "metrics.json").read_text())
    return metrics["data"]["sizes_used"]


def test_a_subset_run_builds_the_conformers_of_its_subset_alone(tiny) -> None:
    small = tiny.result("small").ok()
    assert sizes_used(tiny, 5) == dict.fromkeys(SETS, 5)
    assert f"featurising 20 of the {N_MOLECULES} molecules of csv-tiny with graph3d" in (
        small.stdout + small.stderr
    )
    larger = tiny.result("larger").ok()
    sizes = sizes_used(tiny, 8)
    assert sizes == {**dict.fromkeys(SETS, 8), "id": 5}  # the tiny task's ID set is 5
    total = sum(sizes.values())
    log = larger.stdout + larger.stderr
    assert f"featurising {total - 20} of the {N_MOLECULES} molecules" in log
    assert "(20 more are kept from before)" in log
    cache = conformer_cache(tiny)
    assert len(cache.mol_ids()) == total and cache.failed == {}
    assert used(tiny, 5) <= used(tiny, 8) <= set(cache.mol_ids().tolist())
