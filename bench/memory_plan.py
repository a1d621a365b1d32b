"""What a run's memory plan costs in a process that imported what a run imports: the plan
of a small MLP, with the collections before its measurements walking every object of the
process against walking only those the plan made (`collecting_only_new_objects`), side
by side in one process.

    python -m bench.memory_plan [--plans 3]

Columns: the objects the collector tracks before the plans, then per side the seconds per
plan (median and max over `--plans`), and the speed-up of the medians.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import statistics
import time
from functools import partial

import lightning  # noqa: F401  (what a run has imported before it plans)
import numpy as np
import torch

import oodmol.apps.train  # noqa: F401
import oodmol.training.memory as memory
from oodmol.data.batches import VectorBatch
from oodmol.models.backbones.mlp import MLPBackbone
from oodmol.models.module import PropertyRegressor

CPU = torch.device("cpu")
WIDTH = 64


class Molecules:
    """A training set of `n` random vectors of `width`, as a feature set's dataset gives
    them (`__getitems__`: one batch)."""

    def __init__(self, n: int, width: int = WIDTH) -> None:
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, width, generator=generator)
        self.y = torch.randn(n, generator=generator)

    def __len__(self) -> int:
        return len(self.y)

    def __getitems__(self, indices: list[int]) -> list[VectorBatch]:
        index = torch.tensor(indices)
        return [VectorBatch(x=self.x[index], y=self.y[index], index=index)]


def plan_seconds(walk_everything: bool, plans: int) -> list[float]:
    data = Molecules(512)
    orders = lambda size: (np.random.default_rng(e).permutation(len(data)) for e in range(2))  # noqa: E731
    chosen = memory.collecting_only_new_objects
    if walk_everything:
        memory.collecting_only_new_objects = contextlib.nullcontext
    seconds = []
    try:
        for _ in range(plans):
            model = PropertyRegressor(MLPBackbone(WIDTH, [256]), partial(torch.optim.Adam))
            training = memory.TrainingBatches(data, 32, orders)
            started = time.perf_counter()
            memory.plan_memory(model, lambda b: b[0], CPU, [data], 256, 0.5, training=training)
            seconds.append(time.perf_counter() - started)
    finally:
        memory.collecting_only_new_objects = chosen
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plans", type=int, default=3)
    args = parser.parse_args()
    gc.collect()
    print(f"objects tracked by the collector: {len(gc.get_objects()):,}")
    sides = {
        "every object walked": plan_seconds(True, args.plans),
        "only the plan's": plan_seconds(False, args.plans),
    }
    for name, seconds in sides.items():
        print(f"{name:22s} median {statistics.median(seconds):6.2f} s  max {max(seconds):6.2f} s")
    walked, new = (statistics.median(s) for s in sides.values())
    print(f"speed-up: {walked / new:.1f}x")


if __name__ == "__main__":
    main()
