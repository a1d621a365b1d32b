"""train.py with model=chemberta, modernbert, molformer, rt and rt_regression (tiny sizes)
on the tiny CSV task:
each trains on the token features and scores ID and OOD, and evaluate.py rebuilds the
model from its checkpoint with identical predictions; ChemBERTa also starts from a tiny
pretrained RoBERTa given as a hub id found in OODMOL_MODEL_DIR (its own BPE tokenizer),
MoLFormer and the Regression Transformer from tiny hub-layout folders there (their
tokenizer.json); the RT counts its malformed decodes per set,
and a hub id found nowhere fails with a message that says where it was looked for."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pandas as pd
import pytest
from e2e_helpers import QUIET, TinyTask, scored_rows
from smiles_helpers import save_tiny_molformer, save_tiny_roberta, save_tiny_rt

pytestmark = pytest.mark.slow

TINY = ["layers=2", "heads=2", "hidden=16", "intermediate=32"]
HUB_ID = "someone/tiny-chemberta"
MOLFORMER_ID = "someone/tiny-molformer"
RT_ID = "someone/tiny-rt"
RUNS = {
    "chemberta": ["model=chemberta", *[f"model.module.backbone.{o}" for o in TINY]],
    "modernbert": ["model=modernbert", *[f"model.module.backbone.{o}" for o in TINY]],
    "molformer": ["model=molformer", *[f"model.module.backbone.{o}" for o in TINY]],
    "pretrained": ["model=chemberta", f"model.pretrained={HUB_ID}"],
    "molformer_pretrained": ["model=molformer", f"model.pretrained={MOLFORMER_ID}"],
    "rt": ["model=rt", *[f"model.module.backbone.{o}" for o in TINY]],
    "rt_regression": ["model=rt_regression", *[f"model.module.backbone.{o}" for o in TINY]],
    "rt_pretrained": ["model=rt", f"model.pretrained={RT_ID}", "model.batch_size=32"],
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TinyTask]:
    task = TinyTask.create(tmp_path_factory.mktemp("smiles"))
    copies = task.root / "models"
    save_tiny_roberta(copies / HUB_ID)
    save_tiny_molformer(copies / MOLFORMER_ID)
    save_tiny_rt(copies / RT_ID)
    env = {"OODMOL_MODEL_DIR": str(copies), "HF_HUB_OFFLINE": "1"}

    def train(name: str) -> list[str]:
        out = task.root / name
        return ["train.py", *RUNS[name], "model.max_epochs=2", *task.task_args(), *QUIET,
                f"hydra.run.dir={out}"]  # fmt: skip

    def evaluate(name: str) -> list[str]:
        best = task.root / name / "checkpoints" / "best.ckpt"
        return ["evaluate.py", f"ckpt_path={best}", "progress=false",
                f"hydra.run.dir={task.root / f'{name}_eval'}"]  # fmt: skip

    for name in RUNS:
        task.submit_chain(
            (name, lambda name=name: task.run(train(name), env=env)),
            (f"{name}_eval", lambda name=name: task.run(evaluate(name), env=env)),
        )
    missing = ["train.py", "model=chemberta", "model.pretrained=nobody/absent", *task.task_args(),
               *QUIET, f"hydra.run.dir={task.root / 'missing'}"]  # fmt: skip
    task.submit("missing", missing, env={"OODMOL_MODEL_DIR": str(copies), "HF_HUB_OFFLINE": "1"})
    yield task
    task.close()


@pytest.mark.parametrize("run", list(RUNS))
def test_smiles_model_trains_and_its_checkpoint_predicts_the_same(tiny, run):
    tiny.result(run).ok()
    tiny.result(f"{run}_eval").ok()
    out = tiny.root / run
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["status"] == "complete"
    trained = scored_rows(pd.read_csv(out / "predictions.csv"))
    assert sorted(trained["set"].unique()) == ["id", "ood"]
    assert trained["y_pred"].notna().all()
    rebuilt = scored_rows(pd.read_csv(tiny.root / f"{run}_eval" / "predictions.csv"))
    pd.testing.assert_frame_equal(rebuilt.reset_index(drop=True), trained.reset_index(drop=True))


def test_a_pretrained_model_found_nowhere_is_named(tiny):
    output = tiny.result("missing").failed().output()
    assert "model.pretrained=nobody/absent: not a local folder" in output
    assert "OODMOL_MODEL_DIR" in output and "--local-dir" in output


@pytest.mark.parametrize("run", ["rt", "rt_pretrained"])
def test_the_rt_counts_its_malformed_decodes(tiny, run):
    metrics = json.loads((tiny.root / run / "metrics.json").read_text())
    predictions = scored_rows(pd.read_csv(tiny.root / run / "predictions.csv"))
    assert set(predictions["malformed"]) <= {0, 1}
    for name in ("id", "ood"):
        flagged = predictions.loc[predictions["set"] == name, "malformed"]
        assert metrics[name]["malformed"] == flagged.sum()
