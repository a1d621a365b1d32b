"""train.py with every 3D model on the tiny CSV task: conformers are generated, cached
once and shared by all models, each model trains, and its ID and OOD predictions are
scored. Sizes are shrunk to a few channels; the published sizes are checked by each
model's own tests (tests/test_models_*.py) and by bench/models_throughput.py."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pandas as pd
import pytest
from e2e_helpers import QUIET, TinyTask, scored_rows

pytestmark = pytest.mark.slow

TINY = {
    "ignn": ["hidden=8", "layers=1"],
    "egnn": ["hidden=8", "layers=1"],
    "schnet": ["hidden_channels=8", "num_filters=8", "num_interactions=1"],
    "dimenetpp": ["hidden_channels=8", "out_emb_channels=8", "num_spherical=2", "num_radial=2"],
    "visnet": ["hidden_channels=8", "num_layers=1", "num_rbf=8"],
    "painn": ["hidden=8", "layers=1"],
    "et": ["hidden=8", "layers=1", "heads=2"],
    "painn_dipole": ["hidden=8", "layers=1"],
    "mace": ["num_channels=4", "radial_mlp=[8]", "mlp_irreps=4x0e"],
    "graphormer3d": ["node_dim=8", "ff_dim=8", "edge_dim=4", "num_convs=1", "num_heads=2"],
    "geoformer": ["embedding_dim=8", "ffn_embedding_dim=8", "num_layers=2", "num_heads=2"],
}


def command(task: TinyTask, model: str) -> list[str]:
    sizes = [f"model.module.backbone.{o}" for o in TINY[model]]
    out = task.root / model
    return [
        "train.py",
        f"model={model}",
        *sizes,
        "model.max_epochs=1",
        "model.batch_size=32",
        *task.task_args(),
        *QUIET,
        f"hydra.run.dir={out}",
    ]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TinyTask]:
    task = TinyTask.create(tmp_path_factory.mktemp("models3d"))
    # the first run builds the conformer cache; the others then only read it
    first, *rest = TINY
    task.submit_chain((first, lambda: task.run(command(task, first))))
    task.result(first)
    for model in rest:
        task.submit(model, command(task, model))
    boom = [*command(task, "egnn")[:-1], "protocol=boom", f"hydra.run.dir={task.root / 'boom'}"]
    task.submit("egnn@boom", boom)
    yield task
    task.close()


@pytest.mark.parametrize("model", list(TINY))
def test_3d_model_trains_and_scores_id_and_ood(tiny, model):
    tiny.result(model).ok()
    out = tiny.root / model
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["model"] == model
    assert metrics["data"]["left_out"] == {}  # every tiny molecule has a conformer
    predictions = scored_rows(pd.read_csv(out / "predictions.csv"))
    assert sorted(predictions["set"].unique()) == ["id", "ood"]
    assert predictions["y_pred"].notna().all()
    assert len(list((tiny.data_dir / "features").glob("*-graph3d-*.lmdb"))) == 1


def test_3d_model_trains_under_boom_protocol_without_a_validation_set(tiny):
    tiny.result("egnn@boom").ok()
    default = json.loads((tiny.root / "egnn" / "metrics.json").read_text())
    boom = json.loads((tiny.root / "boom" / "metrics.json").read_text())
    ours, theirs = default["data"]["sizes_used"], boom["data"]["sizes_used"]
    assert theirs["val"] == 0 and theirs["train"] == ours["train"] + ours["val"]
    assert boom["training"]["tested"] == "last"
