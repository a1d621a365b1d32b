"""Batches that fit the machine (`oodmol.training.memory`): the evaluation batch cut to
what fits a memory limit, a training batch that cannot fit refused before training, naming
the largest batch size that does, and the model and the random generators left as they
were."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import torch

from bench.memory_plan import Molecules
from oodmol.data.batches import VectorBatch
from oodmol.errors import InputError, UserError
from oodmol.models.backbones.mlp import MLPBackbone
from oodmol.models.module import PropertyRegressor
from oodmol.training.memory import (
    OPTIMIZER_COPIES,
    BatchTooLarge,
    TrainingBatches,
    halving_on_oom,
    largest_fitting_batch,
    plan_memory,
    training_need,
)
from oodmol.training.memory_curve import MARGIN, SLACK, BatchCost
from oodmol.training.memory_meter import MB, can_measure

CPU = torch.device("cpu")
WIDTH = 8
WIDE = 2**16  # a hidden layer of 256 kB per molecule: memory the machine's count resolves
measurable = pytest.mark.skipif(not can_measure(CPU), reason="needs Linux's /proc/self")


def collate(items: list[VectorBatch]) -> VectorBatch:
    return items[0]


def shuffled(n: int, epochs: int = 2):
    """Each epoch's order of `n` molecules, whatever the batch size."""
    return lambda batch_size: (np.random.default_rng(e).permutation(n) for e in range(epochs))


def wide() -> PropertyRegressor:
    torch.manual_seed(0)
    return PropertyRegressor(MLPBackbone(WIDTH, [WIDE]), partial(torch.optim.Adam, lr=1e-3))


def plan(model, limit_mb: float, batch_size: int | None = 32, eval_batch_size: int = 256):
    data = Molecules(300, WIDTH)
    training = TrainingBatches(data, batch_size, shuffled(len(data))) if batch_size else None
    return plan_memory(
        model,
        collate,
        CPU,
        [data],
        eval_batch_size=eval_batch_size,
        fraction=0.5,
        limit_mb=limit_mb,
        training=training,
    )


@measurable
def test_the_evaluation_batch_is_what_fits_the_memory_limit() -> None:
    roomy = plan(wide(), limit_mb=10_000, batch_size=None)
    assert roomy.eval_batch == 256  # the batch asked for fits
    per_molecule = roomy.eval_cost["added_mb"][0]
    assert per_molecule >= WIDE * 4 / MB  # at least its hidden layer
    fixed = roomy.eval_cost["fixed_mb"]
    # half of it is this run's: 100 molecules, with what covers the allocator
    limit = 2 * ((fixed + 100 * per_molecule) * (1 + MARGIN) + SLACK / MB)
    tight = plan(wide(), limit_mb=limit, batch_size=None)
    # measured again: within what a first use of a batch's shapes adds to a measurement
    assert 50 <= tight.eval_batch <= 200
    assert tight.eval_need_mb <= limit / 2


@measurable
def test_a_training_batch_that_cannot_fit_is_refused_in_one_line_naming_one_that_can() -> None:
    roomy = plan(wide(), limit_mb=10_000, batch_size=256)
    assert roomy.train_batches_sized == 2 * 2  # two epochs of 300 molecules in batches of 256
    refused_at = 2 * roomy.train_need_mb / 3  # a limit whose half (this run's) is a third
    with pytest.raises(BatchTooLarge, match=r"lower model\.batch_size to \d+ or less") as refused:
        plan(wide(), limit_mb=refused_at, batch_size=256)
    message = str(refused.value)
    assert isinstance(refused.value, UserError)
    assert "\n" not in message
    assert message.startswith("model.batch_size=256 needs about")
    assert "largest training step" in message and "50% of" in message


def test_the_batch_size_named_fits_and_is_about_the_largest_that_does() -> None:
    """The batch size named in a refusal fits the budget; one a fifth larger does not."""
    cost = BatchCost(fixed=100 * MB, sizes=(0.0, 100.0), added=(0.0, 10 * MB))
    sizes = np.random.default_rng(0).integers(1, 100, 500)
    training = TrainingBatches(None, 64, shuffled(len(sizes), epochs=3))
    weights = 5 * MB
    budget = 400 * MB  # about 30 molecules of 50 atoms beside the fixed cost and margin
    assert training_need(cost, training, sizes, weights, 64)[0] > budget
    fits = largest_fitting_batch(cost, training, sizes, weights, budget)
    need, batches = training_need(cost, training, sizes, weights, fits)
    assert 20 < fits < 64
    assert need <= budget < training_need(cost, training, sizes, weights, fits * 6 // 5)[0]
    assert batches == 3 * -(-500 // fits)  # every batch of the three epochs
    assert need >= OPTIMIZER_COPIES * weights + cost.fixed


def test_a_memory_fraction_outside_0_to_1_is_refused_in_one_line() -> None:
    for fraction in (0, 1.5, "most"):
        with pytest.raises(InputError, match="memory_fraction must be a share") as refused:
            plan_memory(wide(), collate, CPU, [Molecules(4, WIDTH)], 8, fraction=fraction)
        assert "\n" not in str(refused.value)


@measurable
def test_measuring_leaves_the_random_generators_and_the_weights_as_they_were() -> None:
    model = wide()
    weights = [p.detach().clone() for p in model.parameters()]
    torch.manual_seed(3)
    expected = torch.rand(3)
    torch.manual_seed(3)
    plan(model, limit_mb=10_000)
    assert torch.equal(torch.rand(3), expected)
    assert all(torch.equal(a, b) for a, b in zip(weights, model.parameters(), strict=True))
    assert all(p.grad is None for p in model.parameters())


def test_a_model_without_trained_weights_is_not_measured() -> None:
    class Forest(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("trees", torch.zeros(3))

    assert plan(Forest(), limit_mb=1) is None


def test_an_evaluation_out_of_memory_runs_again_with_half_the_batch(caplog) -> None:
    tried: list[int] = []

    def evaluate(batch_size: int) -> int:
        tried.append(batch_size)
        if batch_size > 100:
            raise torch.OutOfMemoryError("CUDA out of memory")
        return batch_size  # what the evaluation that ran returns

    with caplog.at_level("WARNING", logger="oodmol.training.memory"):
        assert halving_on_oom(evaluate, 512) == 64
    assert tried == [512, 256, 128, 64]
    assert [r.getMessage() for r in caplog.records] == [
        "the device ran out of memory evaluating in batches of 512 molecules: evaluated "
        "in batches of 64 (eval_batch_size=64 fits)"
    ]
    caplog.clear()
    assert halving_on_oom(evaluate, 100) == 100 and not caplog.records  # fits: nothing said


def test_an_evaluation_out_of_memory_at_one_molecule_is_the_devices_error() -> None:
    def evaluate(batch_size: int) -> None:
        raise torch.OutOfMemoryError("CUDA out of memory")

    with pytest.raises(torch.OutOfMemoryError):
        halving_on_oom(evaluate, 4)
