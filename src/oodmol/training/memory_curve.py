"""What a step costs on any batch, from steps on a few molecules.

A batch's peak memory is what any step takes plus what each of its molecules adds. Models
differ in what a molecule adds: its own atoms and pairs (message passing: a small molecule
adds little), or as much as the batch's largest molecule, to whose size every molecule
is padded (dense pair tensors, token sequences). So the set's largest molecule is
probed alone, then with the smallest and with the second largest beside it. Where the
smallest adds at least half as much as the second largest, the model pads, and what a
molecule adds is measured as a function of its batch's largest molecule (also probes
whose largest is the median and the 90th-percentile molecule). Else it is a function of
the molecule's own size: the second largest's, and at the smallest, median and
90th-percentile sizes over as many molecules of about that size, beside the largest, as
rise clear of the measurement's noise and of what one molecule's geometry makes of its
size. Between probe sizes the curve is linear, which lies above a cost that grows faster
than the atoms (pairs). A step's peak varies from run to run with where the allocator
puts things, and grows over a run's first steps where freed memory is kept, so estimates
carry `MARGIN` and `SLACK` above the curve.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

MB = 2**20
ENDS = (0.0, 1.0)  # size quantiles probed first: the smallest and the second largest
LARGEST = (1.0,)  # the second largest alone: every molecule costed as the largest
BETWEEN = (0.5, 0.9)  # probed too where the ends differ, or as the largest of a padded batch
FLAT = 0.5  # the smallest adds this share of the second largest or more: padded
SPAN = 4  # a probe adds molecules that take up to this many times the largest alone
# above the estimate: a step's peak varies from run to run, and a heap that keeps freed
# memory (oodmol.allocator) grows over the first steps: by a tenth for ET at 1.3 GB, a
# third for a small token model at 200 MB (bench/memory_planner.py)
MARGIN = 0.2
SLACK = 64 * MB


@dataclass(frozen=True)
class BatchCost:
    """Peak bytes of a step: what any step takes (`fixed`), and what each molecule adds
    (`added`, non-decreasing in `sizes`): by its own size, or where the model pads
    (`padded`), by the size of its batch's largest molecule."""

    fixed: float
    sizes: tuple[float, ...]
    added: tuple[float, ...]
    padded: bool = False

    def adds(self, sizes: np.ndarray) -> np.ndarray:
        return np.interp(sizes, self.sizes, self.added)

    def of_batches(self, order: np.ndarray, batch_size: int, sizes: np.ndarray) -> np.ndarray:
        """The estimated peak of each batch of `order` cut as a loader cuts it
        (`batch_size` molecules, the last batch what is left), `MARGIN` and `SLACK`
        included."""
        molecules = sizes[order].astype(float)
        starts = np.arange(0, len(order), batch_size)
        if self.padded:
            counts = np.diff(np.append(starts, len(order)))
            added = counts * self.adds(np.maximum.reduceat(molecules, starts))
        else:
            added = np.add.reduceat(self.adds(molecules), starts)
        return (self.fixed + added) * (1 + MARGIN) + SLACK

    def bound(self, count: int) -> float:
        """The most a batch of `count` molecules takes: each costed as the largest adds,
        `MARGIN` and `SLACK` included."""
        return (self.fixed + count * max(self.added)) * (1 + MARGIN) + SLACK

    def most_molecules(self, room: float) -> int:
        """How many molecules a batch may hold within `room` bytes by `bound`."""
        per_molecule = max(self.added)
        spare = (room - SLACK) / (1 + MARGIN) - self.fixed
        return int(spare // per_molecule) if per_molecule > 0 else (1 << 62) * (spare >= 0)

    def facts(self) -> dict:
        return {
            "fixed_mb": round(self.fixed / MB, 1),
            "sizes": [round(s) for s in self.sizes],
            "added_mb": [round(float(a) / MB, 2) for a in self.added],
            "padded": self.padded,
        }


def measure_cost(
    peak: Callable[[list[int]], int],
    sizes: np.ndarray,
    batch_size: int,
    room: float,
    quantiles: Sequence[float] = ENDS,
) -> BatchCost:
    """The curve of a set whose molecules have `sizes` (atoms, tokens; all alike for
    fixed-length vectors), from `peak`, the peak bytes of a step on the molecules at some
    indices. No probe holds a batch's molecules (`batch_size`) or is meant to take more
    than `room` bytes; a largest molecule that takes it all ends the probing. `quantiles`
    (ENDS, or LARGEST for an upper bound) choose the probe molecules."""
    ascending = np.argsort(sizes, kind="stable")
    largest = int(ascending[-1])
    others = ascending[:-1] if len(ascending) > 1 else ascending
    peak([largest])  # first use: thread pools and kernel caches that stay
    alone = peak([largest])
    if batch_size <= 1:
        return BatchCost(alone, (0.0,), (0.0,))  # a batch is one molecule, at most the largest
    if alone >= room:
        return BatchCost(0.0, (0.0,), (float(alone),))  # as if every molecule were the largest

    def position(quantile: float) -> int:
        return round(quantile * (len(others) - 1))

    def added(top: int, top_alone: float, molecules: np.ndarray) -> float:
        """What each of `molecules` adds to a step on `top` alone."""
        return max(peak([top, *molecules.tolist()]) - top_alone, 0) / len(molecules)

    def how_many(top_alone: float, one: float, span: float) -> int:
        """Molecules that each add about `one` and together take up to `span` times
        `top_alone`, within `room` and short of a batch: enough to rise above noise."""
        one = max(one, 1)
        most = min(batch_size - 1, span * top_alone // one, (room - top_alone) // one)
        return int(max(1, min(most, len(others))))

    ends = {at: added(largest, alone, others[[at]]) for at in map(position, quantiles)}
    low, high = min(ends), max(ends)
    if len(ends) == 1 or ends[low] >= FLAT * ends[high]:
        # padded: a molecule adds what the batch's largest sets, measured with the
        # largest molecules below each probed one
        flat = max(ends.values())
        tops = {position(q): int(others[position(q)]) for q in BETWEEN if len(ends) > 1}
        points = []
        for at, top in [(len(others), largest), *tops.items()]:
            top_alone = alone if top == largest else peak([top])
            below = others[:at] if at else others[:1]
            window = below[-how_many(top_alone, flat, 1) :]
            points.append((float(sizes[top]), added(top, top_alone, window)))
        fixed = alone - points[0][1]
        return _curve(fixed, points[:1] if len(ends) == 1 else points, padded=len(ends) > 1)
    # below the second largest, each quantile over several molecules of about its size
    # (what one adds hangs on its geometry too); the second largest alone caps the line
    points = [(float(sizes[others[high]]), ends[high])]
    for at in sorted({position(q) for q in (ENDS[0], *BETWEEN)} - {high}):
        one = ends[at] if at in ends else float(np.interp(at, [low, high], [ends[low], ends[high]]))
        count = how_many(alone, one, SPAN)
        start = max(0, min(at - count // 2, len(others) - count))
        window = others[start : start + count]
        points.append((float(sizes[window].mean()), added(largest, alone, window)))
    shape = _curve(0.0, points, padded=False)
    return _curve(alone - float(shape.adds(sizes[largest])), points, padded=False)


def _curve(fixed: float, points: list[tuple[float, float]], padded: bool) -> BatchCost:
    """The curve through (size, bytes added) `points`, made non-decreasing."""
    points = sorted(points)
    added = np.maximum.accumulate([a for _, a in points]).tolist()
    return BatchCost(fixed, tuple(s for s, _ in points), tuple(added), padded)
