"""model.init_from / model.freeze (oodmol.training.transfer): what is loaded and skipped,
frozen parameters get no gradient and no update, typos are refused, and the
configuration key of runs that use neither is what it was before these settings."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
import torch

from oodmol.config import compose_config
from oodmol.data.batches import VectorBatch
from oodmol.identity import config_key
from oodmol.models.backbones.mlp import MLPBackbone
from oodmol.models.module import PropertyRegressor
from oodmol.training.build import CONFIG_KEY, RUN_KEY
from oodmol.training.transfer import TransferError, apply_transfer, load_matching

PARTS = {"body": ["backbone.net"]}


def _model(seed: int, head_hidden: list[int] | None = None) -> PropertyRegressor:
    torch.manual_seed(seed)
    optimizer = partial(torch.optim.Adam, lr=0.1)
    return PropertyRegressor(MLPBackbone(6, [5]), optimizer, head_hidden=head_hidden)


def _checkpoint(tmp_path: Path, model: PropertyRegressor) -> Path:
    """A checkpoint as train.py writes it (state dict, run config and entry)."""
    path = tmp_path / "source.ckpt"
    config = {"task": {"name": "source_task"}, "model": {"name": "mlp"}}
    torch.save(
        {
            "state_dict": model.state_dict(),
            CONFIG_KEY: config,
            RUN_KEY: {"config_key": "abc"},
            "epoch": 3,
        },
        path,
    )
    return path


def test_loads_what_matches_by_name_and_shape_and_says_why_the_rest_is_skipped() -> None:
    source = _model(0, head_hidden=[4])
    source.y_mean.fill_(123.0)
    target = _model(1, head_hidden=[3])  # the head's first layer has another shape
    fresh_head = {k: v.clone() for k, v in target.state_dict().items() if k.startswith("head")}
    report = load_matching(target, source.state_dict())
    backbone = [k for k in source.state_dict() if k.startswith("backbone")]
    assert report["loaded"] == 3  # the backbone's two tensors and the output bias (1,)
    for name in [*backbone, "head.net.3.bias"]:
        assert torch.equal(target.state_dict()[name], source.state_dict()[name])
    assert target.y_mean.item() == 0.0  # the source's target scaling is never taken
    skipped = report["skipped"]
    assert skipped == {
        "target scaling of the source run (refit on this run's training set)": [
            "y_mean",
            "y_std",
        ],
        "another shape here": ["head.net.0.bias", "head.net.0.weight", "head.net.3.weight"],
    }
    for name in skipped["another shape here"]:
        assert torch.equal(target.state_dict()[name], fresh_head[name])
    assert report["kept_fresh"] == skipped["another shape here"]


def test_frozen_parameters_get_no_gradient_and_stay_bit_identical(tmp_path: Path) -> None:
    source = _model(0)
    target = _model(1)
    record = apply_transfer(target, str(_checkpoint(tmp_path, source)), ["body"], PARTS)
    frozen = {n: p.detach().clone() for n, p in target.named_parameters() if n.startswith("back")}
    for name, value in frozen.items():
        assert torch.equal(value, source.state_dict()[name])
    assert record["init_from"]["task"] == "source_task"
    assert record["init_from"]["loaded"] == 4  # backbone and head: both shapes match
    assert record["frozen_tensors"] == 2
    assert record["frozen_values"] == 6 * 5 + 5
    assert record["trainable_values"] == 5 + 1
    optimizer = target.configure_optimizers()
    head_before = target.head.net[0].weight.detach().clone()
    for _ in range(3):
        optimizer.zero_grad()
        batch = VectorBatch(x=torch.randn(8, 6), y=torch.randn(8), index=torch.arange(8))
        loss = target.training_step(batch, 0)
        loss.backward()
        for name, parameter in target.named_parameters():
            assert (parameter.grad is None) == (name in frozen), name
        optimizer.step()
    for name, parameter in target.named_parameters():
        if name in frozen:
            assert torch.equal(parameter, frozen[name]), name
    assert not torch.equal(target.head.net[0].weight, head_before)


def test_a_freeze_name_that_matches_nothing_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(
        TransferError, match=r"no parameter of the model is under \['backbone.nope'\]"
    ):
        apply_transfer(_model(0), None, ["backbone.nope"], PARTS)
    with pytest.raises(TransferError, match="no such file"):
        apply_transfer(_model(0), str(tmp_path / "missing.ckpt"))
    with pytest.raises(TransferError, match="need a neural model"):
        apply_transfer(torch.nn.Linear(2, 2), None, ["weight"])
    assert apply_transfer(_model(0), None, []) is None


def test_neutral_defaults_leave_configuration_keys_unchanged(tmp_path: Path) -> None:
    """A run without init_from/freeze keeps the key it had before the settings existed
    (the key of the same config without them); init_from enters by the file's content."""
    for overrides in ([], ["model=chemprop"], ["model=rf"]):
        cfg = compose_config("train", overrides)
        key = config_key(cfg)
        with_open = cfg.copy()
        with_open._set_flag("struct", False)
        for name in ("init_from", "freeze", "parts"):
            with_open.model.pop(name, None)
        assert config_key(with_open) == key
    ckpt = _checkpoint(tmp_path, _model(0))
    copy = tmp_path / "elsewhere.ckpt"
    copy.write_bytes(ckpt.read_bytes())
    keys = {
        config_key(compose_config("train", [f"model.init_from={path}"])) for path in (ckpt, copy)
    }
    assert len(keys) == 1 and keys != {config_key(compose_config("train", []))}
