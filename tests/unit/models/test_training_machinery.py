"""Training machinery the model families need: parameter groups (weight decay, layer-wise
learning rates, frozen parts), the warm-up + cosine schedule, and the precisions."""

from __future__ import annotations

import itertools
import math
from functools import partial
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from oodmol.models.optim import build_optimizer, parameter_groups
from oodmol.models.schedules import linear_decay, warmup_cosine


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(5, 4)
        self.encoder = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4), nn.Linear(4, 4))
        self.head = nn.Linear(4, 1)


def groups_by_name(model: nn.Module, groups: list[dict]) -> dict[str, dict]:
    names = {id(p): n for n, p in model.named_parameters()}
    return {
        names[id(p)]: {k: v for k, v in g.items() if k != "params"}
        for g in groups
        for p in g["params"]
    }


def test_biases_and_norms_get_no_weight_decay() -> None:
    model = Tiny()
    by_name = groups_by_name(model, parameter_groups(model, 1e-3, ["biases", "norms"]))
    assert by_name["encoder.0.weight"] == {} and by_name["head.weight"] == {}
    assert by_name["embedding.weight"] == {}
    for name in ("encoder.0.bias", "encoder.1.weight", "encoder.1.bias", "head.bias"):
        assert by_name[name] == {"weight_decay": 0.0}, name
    everything = parameter_groups(model, 1e-3, ["biases", "norms", "embeddings"])
    assert groups_by_name(model, everything)["embedding.weight"] == {"weight_decay": 0.0}


def test_learning_rate_factor_of_the_longest_matching_prefix() -> None:
    model = Tiny()
    scales = {"encoder": 0.5, "encoder.2": 0.1}
    by_name = groups_by_name(model, parameter_groups(model, 2e-3, lr_scale=scales))
    assert by_name["encoder.0.weight"]["lr"] == pytest.approx(1e-3)
    assert by_name["encoder.2.weight"]["lr"] == pytest.approx(2e-4)
    assert "lr" not in by_name["head.weight"]  # the optimiser's own


def test_frozen_parts_are_not_trained() -> None:
    model = Tiny()
    optimizer = build_optimizer(partial(torch.optim.SGD, lr=0.1), model, {"freeze": ["encoder"]})
    trained = {id(p) for g in optimizer.param_groups for p in g["params"]}
    for name, parameter in model.named_parameters():
        frozen = name.startswith("encoder.")
        assert parameter.requires_grad is not frozen, name
        assert (id(parameter) in trained) is not frozen, name
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    model.head(model.encoder(model.embedding(torch.tensor([1, 2])))).sum().backward()
    optimizer.step()
    for name, parameter in model.named_parameters():
        changed = not torch.equal(parameter, before[name])
        assert changed is not name.startswith("encoder."), name


def test_unknown_prefixes_and_exemptions_are_refused() -> None:
    with pytest.raises(ValueError, match=r"no parameter of the model is under \['encodr'\]"):
        parameter_groups(Tiny(), 1e-3, freeze=["encodr"])
    with pytest.raises(ValueError, match="unknown \\['weights'\\]"):
        parameter_groups(Tiny(), 1e-3, no_weight_decay=["weights"])


def test_warmup_cosine_rates() -> None:
    """10 steps an epoch, 3 epochs: 3 warm-up steps to the full rate, then a cosine to
    `min_lr` at the last step."""
    parameter = nn.Parameter(torch.zeros(()))
    optimizer = torch.optim.SGD([parameter], lr=1.0)
    trainer = SimpleNamespace(
        max_epochs=3, estimated_stepping_batches=30, num_training_batches=10,
        accumulate_grad_batches=1,
    )  # fmt: skip
    schedule = warmup_cosine(optimizer, trainer, warmup_fraction=0.1, min_lr=0.01)
    rates = []
    for _ in range(30):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    assert rates[:3] == pytest.approx([1 / 3, 2 / 3, 1.0])
    midway = 0.01 + 0.99 * 0.5 * (1 + math.cos(math.pi * 13 / 27))
    assert rates[16] == pytest.approx(midway)
    assert rates[-1] == pytest.approx(0.01 + 0.99 * 0.5 * (1 + math.cos(math.pi * 26 / 27)))
    assert all(a >= b for a, b in itertools.pairwise(rates[2:]))


@pytest.mark.parametrize("warmup, expected", [(0, [1.0, 29 / 30, 1 / 30]), (5, [0.0, 1.0, 1 / 25])])
def test_linear_decay_rates(warmup: int, expected: list[float]) -> None:
    """30 steps (Hugging Face's "linear" schedule): warm-up from 0, then down to 0 one step
    past the last."""
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(()))], lr=1.0)
    trainer = SimpleNamespace(
        max_epochs=3, estimated_stepping_batches=30, num_training_batches=10,
        accumulate_grad_batches=1,
    )  # fmt: skip
    schedule = linear_decay(optimizer, trainer, warmup_steps=warmup)
    rates = []
    for _ in range(30):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    assert [rates[0], rates[max(warmup, 1)], rates[-1]] == pytest.approx(expected)
    assert all(a >= b for a, b in itertools.pairwise(rates[warmup:]))
