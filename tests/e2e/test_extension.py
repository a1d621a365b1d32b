"""Adding a model takes one Python file and one YAML file: a toy model, written by this
test outside the repository, declares a training-set statistic, parameter groups and an
EMA of its weights, and trains through train.py without a change to the core; evaluate.py
rebuilds it from its checkpoint alone. The trainer's precisions run end to end too."""

from __future__ import annotations

import json
import os
import textwrap

import pandas as pd
import pytest
import torch
from e2e_helpers import MLP, QUIET, REPO, TinyTask, scored_rows

pytestmark = pytest.mark.slow

TOY_MODEL = '''
"""A toy backbone: an embedding of the input vector, a layer norm, one hidden layer."""

import torch
from torch import nn


class ToyBackbone(nn.Module):
    def __init__(self, in_dim: int, hidden: int) -> None:
        super().__init__()
        self.embed = nn.Linear(in_dim, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.out_dim = hidden

    def forward(self, batch) -> torch.Tensor:
        return torch.relu(self.norm(self.embed(batch.x)))
'''
TOY_TOKENS_MODEL = '''
"""A toy token backbone: token embeddings averaged over each molecule's real tokens."""

import torch
from torch import nn


class ToyTokens(nn.Module):
    def __init__(self, vocab_size: int, pad_id: int, hidden: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, hidden, padding_idx=pad_id)
        self.out_dim = hidden

    def forward(self, batch) -> torch.Tensor:
        mask = batch.attention_mask.unsqueeze(-1).float()
        return (self.embed(batch.input_ids) * mask).sum(1) / mask.sum(1)
'''
TOY_TOKENS_YAML = """
name: toy_tokens
max_epochs: 2
batch_size: 16
featurizer: {_target_: oodmol.data.featurize.smiles.SmilesText}
features: {_target_: oodmol.data.tokens.TokenFeatures}
statistics:
  backbone.vocab_size: {_target_: oodmol.data.statistics.FeatureFact, name: vocab_size}
  backbone.pad_id: {_target_: oodmol.data.statistics.FeatureFact, name: pad_id}
module:
  _target_: oodmol.models.module.PropertyRegressor
  extensive: ${task.extensive}
  backbone: {_target_: toy_tokens.ToyTokens, hidden: 8}
  head_hidden: []
  optimizer: {_target_: torch.optim.Adam, _partial_: true, lr: 1.0e-2}
"""
TOY_YAML = """
name: toy
max_epochs: 3
batch_size: 16
featurizer:
  _target_: oodmol.data.featurize.fingerprints.MorganFingerprint
  radius: 2
  n_bits: 128
  counts: false
features:
  _target_: oodmol.data.features.VectorFeatures
  standardize: true
statistics:
  backbone.in_dim: {_target_: oodmol.data.statistics.FeatureFact, name: in_dim}
callbacks:
  ema: {_target_: oodmol.training.averaging.EMA, decay: 0.5}
module:
  _target_: oodmol.models.module.PropertyRegressor
  extensive: ${task.extensive}
  backbone: {_target_: toy_model.ToyBackbone, hidden: 8}
  head_hidden: []
  optimizer: {_target_: torch.optim.AdamW, _partial_: true, lr: 1.0e-2, weight_decay: 0.1}
  parameter_groups:
    no_weight_decay: [biases, norms]
    lr_scale: {backbone.embed: 0.5}
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory):
    task = TinyTask.create(tmp_path_factory.mktemp("extension"))
    root = task.root
    (root / "code").mkdir()
    (root / "code" / "toy_model.py").write_text(TOY_MODEL)
    (root / "configs" / "model").mkdir(parents=True)
    (root / "configs" / "model" / "toy.yaml").write_text(textwrap.dedent(TOY_YAML))
    (root / "code" / "toy_tokens.py").write_text(TOY_TOKENS_MODEL)
    (root / "configs" / "model" / "toy_tokens.yaml").write_text(textwrap.dedent(TOY_TOKENS_YAML))

    def train(model: str, folder: str) -> list[str]:
        return [
            "train.py", f"--config-dir={root / 'configs'}", f"model={model}",
            *task.task_args(), *QUIET, f"hydra.run.dir={root / folder}",
        ]  # fmt: skip

    toy = train("toy", "toy")
    code = {"PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(root / "code")])}
    best = root / "toy" / "checkpoints" / "best.ckpt"
    rescore = [
        "evaluate.py",
        f"--config-dir={root / 'configs'}",  # names the toy's _target_s: they may be built
        f"ckpt_path={best}",
        "progress=false",
        f"hydra.run.dir={root / 'again'}",
    ]
    task.submit_chain(
        ("toy", lambda: task.run(toy, env=code)),
        ("again", lambda: task.run(rescore, env=code)),
    )
    task.submit("tokens", lambda: task.run(train("toy_tokens", "tokens"), env=code))
    for precision in ("64-true", "bf16-mixed"):
        run = ["train.py", *task.task_args(), *QUIET, *MLP, f"trainer.precision={precision}"]
        task.submit(precision, [*run, f"hydra.run.dir={root / precision}"])
    yield task
    task.close()


def test_toy_model_trains_through_train_py(runs: TinyTask) -> None:
    runs.result("toy").ok()
    metrics = json.loads((runs.root / "toy" / "metrics.json").read_text())
    assert metrics["model"] == "toy" and metrics["status"] == "complete"
    saved = torch.load(runs.root / "toy" / "checkpoints" / "best.ckpt", weights_only=True)
    assert saved["oodmol_statistics"] == {"backbone.in_dim": 128}  # the statistic it declared
    # parameter groups: no decay on the bias and the norm, half the rate on the embedding
    groups = saved["optimizer_states"][0]["param_groups"]
    settings = sorted((g["weight_decay"], g["lr"], len(g["params"])) for g in groups)
    assert settings == [
        (0.0, pytest.approx(5e-3), 1),  # backbone.embed.bias
        (0.0, pytest.approx(1e-2), 3),  # norm weight and bias, head bias
        (0.1, pytest.approx(5e-3), 1),  # backbone.embed.weight
        (0.1, pytest.approx(1e-2), 1),  # head weight
    ]
    # EMA: the checkpoint's weights are the average, the trained ones travel beside them
    average, trained = saved["state_dict"], saved["current_model_state"]
    assert not torch.equal(average["backbone.embed.weight"], trained["backbone.embed.weight"])


def test_the_tested_weights_are_the_averaged_ones(runs: TinyTask) -> None:
    """evaluate.py loads best.ckpt's state_dict (the average) into a model rebuilt from
    the checkpoint's config (the toy code is on PYTHONPATH; the configs folder names its
    classes, without which a checkpoint's class is never built): its predictions are the
    run's own."""
    runs.result("again").ok()
    ours, again = (
        scored_rows(pd.read_csv(runs.root / name / "predictions.csv")).reset_index(drop=True)
        for name in ("toy", "again")
    )
    pd.testing.assert_frame_equal(ours, again)


def test_toy_token_model_trains_on_token_features(runs: TinyTask) -> None:
    runs.result("tokens").ok()
    folder = runs.root / "tokens"
    saved = torch.load(folder / "checkpoints" / "best.ckpt", weights_only=True)
    statistics = saved["oodmol_statistics"]
    assert statistics["backbone.pad_id"] == 0 and statistics["backbone.vocab_size"] > 10
    assert (
        saved["state_dict"]["backbone.embed.weight"].shape[0] == statistics["backbone.vocab_size"]
    )
    assert "tokenizer" in saved["oodmol_features"]  # the vocabulary travels with the model
    assert list((runs.data_dir / "features").glob("*.tokenizer.json"))  # and beside the cache
    assert scored_rows(pd.read_csv(folder / "predictions.csv"))["y_pred"].notna().all()


@pytest.mark.parametrize("precision, dtype", [("64-true", torch.float64), ("bf16-mixed", None)])
def test_precisions_train_end_to_end(runs: TinyTask, precision: str, dtype) -> None:
    runs.result(precision).ok()
    folder = runs.root / precision
    predictions = scored_rows(pd.read_csv(folder / "predictions.csv"))
    assert predictions["y_pred"].notna().all()
    weights = torch.load(folder / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    expected = dtype or torch.float32  # bf16-mixed keeps float32 weights, computes in bf16
    assert {w.dtype for w in weights.values() if w.is_floating_point()} == {expected}
