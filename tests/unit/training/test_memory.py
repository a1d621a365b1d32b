"""Batches that fit the machine (`oodmol.training.memory`): the CPU's allocations counted as
they are made, the evaluation batch cut to what fits a memory limit, and a training batch
that cannot fit refused before training, naming the batch size that would."""

from __future__ import annotations

from functools import partial

import pytest
import torch

from oodmol.data.batches import VectorBatch
from oodmol.errors import UserError
from oodmol.models.backbones.mlp import MLPBackbone
from oodmol.models.module import PropertyRegressor
from oodmol.training.memory import BatchTooLarge, PeakMemory, plan_memory

FLOAT = 4  # bytes


def test_peak_memory_counts_what_operations_create_while_it_lives() -> None:
    base = torch.ones(1000)  # made before: not counted
    with PeakMemory() as mode:
        a = base + 1  # new: 4000 bytes
        view = a[:10]  # a view of a: no new memory
        b = a * 2  # new: 4000 more
        del a, view, b  # freed: the live count falls back
        c = torch.empty(250)  # 1000 bytes, below the peak
        base.add_(1)  # in place: no new memory
    assert mode.peak == 2 * 1000 * FLOAT
    assert mode.live == 250 * FLOAT
    del c


def test_peak_memory_of_a_linear_layer_grows_with_the_batch() -> None:
    layer = torch.nn.Linear(100, 1000)
    peaks = []
    for batch in (8, 16, 32):
        inputs = torch.randn(batch, 100)
        with PeakMemory() as mode, torch.no_grad():
            layer(inputs)
        peaks.append(mode.peak)
    assert peaks == [batch * 1000 * FLOAT for batch in (8, 16, 32)]


class Molecules:
    """A training set of `n` vectors of width `width`, as a feature set's dataset gives
    them (`__getitems__`: one batch)."""

    def __init__(self, n: int, width: int) -> None:
        self.x = torch.randn(n, width)
        self.y = torch.randn(n)

    def __len__(self) -> int:
        return len(self.y)

    def __getitems__(self, indices: list[int]) -> list[VectorBatch]:
        index = torch.tensor(indices)
        return [VectorBatch(x=self.x[index], y=self.y[index], index=index)]


class DataModule:
    def __init__(self, n: int = 64, width: int = 64) -> None:
        self.datasets = {"train": Molecules(n, width)}
        self.features = type("Features", (), {"collate": staticmethod(lambda items: items[0])})


def mlp(width: int = 64, hidden: int = 512) -> PropertyRegressor:
    torch.manual_seed(0)
    backbone = MLPBackbone(in_dim=width, hidden=[hidden, hidden])
    return PropertyRegressor(backbone, partial(torch.optim.Adam, lr=1e-3))


def plan(model, limit_mb: float, batch_size: int = 32, eval_batch_size: int = 512, data=None):
    data = data or DataModule()
    return plan_memory(
        model,
        data.datasets["train"],
        data.features.collate,
        torch.device("cpu"),
        batch_size=batch_size,
        eval_batch_size=eval_batch_size,
        fraction=0.5,
        limit_mb=limit_mb,
    )


def test_the_evaluation_batch_is_what_fits_the_memory_limit() -> None:
    roomy = plan(mlp(), limit_mb=1000, eval_batch_size=4096)
    assert roomy.eval_batch == 4096  # the batch asked for fits
    # two hidden layers of 512 floats per molecule are alive at the peak of a forward pass
    assert roomy.eval_per_molecule_mb * 2**20 >= 2 * 512 * FLOAT
    limit = 2 * roomy.train_need_mb  # the training step fits; evaluation gets what is left
    tight = plan(mlp(), limit_mb=limit, eval_batch_size=4096)
    room = limit / 2 - roomy.eval_fixed_mb
    assert tight.eval_batch == pytest.approx(room / roomy.eval_per_molecule_mb, abs=2)
    assert 1 < tight.eval_batch < 4096


def test_a_training_batch_that_cannot_fit_is_refused_naming_one_that_can() -> None:
    roomy = plan(mlp(), limit_mb=10_000, batch_size=4096)
    thousand = roomy.train_fixed_mb + 1000 * roomy.train_per_molecule_mb
    with pytest.raises(
        BatchTooLarge, match=r"lower model.batch_size to (99\d|1000) or less"
    ) as refused:
        plan(mlp(), limit_mb=2 * thousand, batch_size=4096)
    assert isinstance(refused.value, UserError)
    assert "model.batch_size=4096 needs about" in str(refused.value)


def test_measuring_leaves_the_random_generators_and_the_weights_as_they_were() -> None:
    model, data = mlp(), DataModule()
    weights = [p.detach().clone() for p in model.parameters()]
    torch.manual_seed(3)
    expected = torch.rand(3)
    torch.manual_seed(3)
    plan(model, limit_mb=1000, data=data)
    assert torch.equal(torch.rand(3), expected)
    assert all(torch.equal(a, b) for a, b in zip(weights, model.parameters(), strict=True))
    assert all(p.grad is None for p in model.parameters())


def test_a_model_without_trained_weights_is_not_measured() -> None:
    class Forest(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("trees", torch.zeros(3))

    assert plan(Forest(), limit_mb=1) is None
