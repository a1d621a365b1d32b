"""What a step costs on any batch, from steps on a few molecules
(`oodmol.training.memory_curve`): for a model whose memory grows with each molecule's own
size and for one that pads every molecule to the batch's largest, the curve measured beside
the largest molecule gives each batch's peak, never below it."""

from __future__ import annotations

import numpy as np
import pytest

from oodmol.training.memory_curve import LARGEST, MARGIN, SLACK, measure_cost

FIXED = 50e6  # bytes a step takes whatever its batch (weights' gradients)
BATCH = 16
ROOM = 100e9  # bytes the probes may take: more than any needs here


def per_molecule(sizes: np.ndarray, indices: list[int]) -> int:
    """A message-passing model: every molecule adds what its own atom pairs take."""
    return int(FIXED + sum(2e4 * sizes[i] ** 2 for i in indices))


def padded(sizes: np.ndarray, indices: list[int]) -> int:
    """A dense pair model: every molecule is padded to the batch's largest."""
    return int(FIXED + len(indices) * 2e4 * max(sizes[i] for i in indices) ** 2)


def sizes_of(n: int = 300, seed: int = 0) -> np.ndarray:
    """Atom counts as drug-like sets have them: most near 40, a long tail to 150."""
    rng = np.random.default_rng(seed)
    return np.clip(rng.lognormal(np.log(40), 0.35, n), 5, 150).round().astype(np.int64)


def batches(sizes: np.ndarray, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).permutation(len(sizes))


@pytest.mark.parametrize("model", [per_molecule, padded])
def test_every_batch_is_estimated_at_or_a_little_above_its_peak(model):
    sizes = sizes_of()
    probes: list[list[int]] = []

    def peak(indices: list[int]) -> int:
        probes.append(indices)
        return model(sizes, indices)

    cost = measure_cost(peak, sizes, BATCH, ROOM)
    order = batches(sizes)
    estimates = cost.of_batches(order, BATCH, sizes)
    cut = [order[start : start + BATCH].tolist() for start in range(0, len(order), BATCH)]
    peaks = np.array([model(sizes, batch) for batch in cut])
    assert len(estimates) == len(cut) == 19  # the last batch holds what is left
    curve = (estimates - SLACK) / (1 + MARGIN)  # without what covers the allocator
    assert (curve >= peaks).all()
    # a line between probed sizes lies above a cost that grows as the square of the size
    assert (curve <= 1.35 * peaks).all()
    assert cost.padded is (model is padded)
    assert max(len(p) for p in probes) <= BATCH  # no probe is larger than a batch


def test_a_batch_of_small_molecules_is_not_sized_as_one_of_the_largest():
    """The largest molecule (150 atoms) costs 35 times a median one (40): a batch is
    sized by what it holds, not by as many copies of the largest."""
    sizes = sizes_of()
    cost = measure_cost(lambda indices: per_molecule(sizes, indices), sizes, BATCH, ROOM)
    worst = cost.of_batches(batches(sizes), BATCH, sizes).max()
    assert worst < 0.3 * per_molecule(sizes, [int(np.argmax(sizes))] * BATCH)


def test_small_costs_are_measured_over_enough_molecules_to_rise_above_noise():
    """Molecules that add less than the measurement resolves are probed many at a time, up
    to one short of a batch; what one adds is their share."""
    sizes = np.array([3] * 20 + [150])
    resolution = 2**20

    def coarse(indices: list[int]) -> int:  # a meter that sees whole megabytes
        return per_molecule(sizes, indices) // resolution * resolution

    cost = measure_cost(coarse, sizes, BATCH, ROOM)
    exact = 2e4 * 9
    assert cost.added[0] == pytest.approx(exact, abs=resolution / (BATCH - 1))
    assert cost.added[0] > 0


def test_evaluation_costs_every_molecule_as_the_largest():
    sizes = sizes_of()
    cost = measure_cost(lambda indices: per_molecule(sizes, indices), sizes, BATCH, ROOM, LARGEST)
    second = np.sort(sizes)[-2]
    assert cost.added == (pytest.approx(2e4 * second**2),)
    alone = per_molecule(sizes, [int(np.argmax(sizes))])
    assert cost.fixed + cost.added[0] == pytest.approx(alone)
    assert cost.bound(10) == pytest.approx((cost.fixed + 10 * cost.added[0]) * (1 + MARGIN) + SLACK)
    assert cost.most_molecules(cost.bound(10)) == 10


def test_a_batch_of_one_molecule_costs_the_largest_alone():
    sizes = sizes_of(20)
    cost = measure_cost(lambda indices: padded(sizes, indices), sizes, 1, ROOM)
    estimates = cost.of_batches(np.arange(20), 1, sizes)
    alone = padded(sizes, [int(np.argmax(sizes))])
    assert estimates == pytest.approx([alone * (1 + MARGIN) + SLACK] * 20)
