"""The memory planner's estimate held against the measured peak for every model family, on
the largest molecules of every data set (`bench.memory_planner`): the 10k CSD set's (156
atoms), Lipophilicity's (216), QM9's (29), beside molecules of typical size. Each family's
models run at small widths, in a process of their own, whose resident size is what is
measured, with freed memory kept as train.py keeps it: the planner's largest estimate of
two epochs of training steps in batches of 8 is at or above the peak of those steps run
one after another, and not far above it (beyond the fixed allowance every estimate
carries for the allocator, `SLACK`). The process is a fork of the test process's zygote,
which imported torch and oodmol once: a peak is measured from where the process stands
when the steps begin, so what the imports hold counts neither way; and the process is no
pytest worker's, so the tests a worker ran before, and those beside it, count neither."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from door_helpers import shared_doors

from bench.memory_planner import FAMILIES
from oodmol.training.memory_curve import MB, SLACK

FAR_ABOVE = 2.0  # an estimate this many times the peak would refuse runs that fit
# ... except where the machine's own count varies that much: a dense-pair model's step on
# the same batch, measured by the resident size, varies by half from one measurement to
# the next (GeoFormer's estimate/peak: 1.09 to 1.70 over six runs of
# `python -m bench.memory_planner --models geoformer` on one machine, 2.6 once on another)
# ... and for the MLP (hidden=[65536], whose first weight of 55 MB dominates its step),
# whose estimate moves by 67 MB from one run to the next: 140-142 MB three times, 207-209
# MB three times and 649 MB once, beside peaks of 64-74 MB, in seven measurements on one
# machine with nothing else running (`python -m bench.memory_planner --models mlp` and
# this test's)
FAR_ABOVE_FOR = {"3D dense pairs": 3.0, "fixed-length vectors": 3.5}
MEASUREMENTS = 3


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The largest molecules' caches, built once for every family."""
    return tmp_path_factory.mktemp("largest")


def measured(family: str, data_dir: Path) -> list[dict]:
    """The planner's estimate and the measured peak of each model of `family`."""
    models = FAMILIES[family]
    command = ["-m", "bench.memory_planner", "--json"]
    command += ["--models", ",".join(models), "--data-dir", str(data_dir)]
    done = shared_doors().run(command, env=dict(os.environ), timeout=1800)
    assert done.returncode == 0, done.shown()
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [r["model"] for r in results] == models
    return results


def outside(family: str, results: list[dict]) -> list[str]:
    """The models whose estimate is below their peak or far above it."""
    far = FAR_ABOVE_FOR.get(family, FAR_ABOVE)
    return [
        f"{r['model']}: estimate {r['estimate'] / MB:.1f} MB, peak {r['peak'] / MB:.1f} MB"
        for r in results
        if not r["peak"] <= r["estimate"] <= far * r["peak"] + SLACK
    ]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_estimate_is_at_or_a_little_above_the_measured_peak(family: str, data_dir: Path):
    """Measured up to MEASUREMENTS times before failing: the resident size is the
    machine's count, and work outside the step moves it now and then (the MLP's estimate,
    2.1 times its peak in three runs here, was 9.5 times once and 3.1 then 9.8 times in
    two runs in a row, in a process beside a busy one)."""
    misses = []
    for _ in range(MEASUREMENTS):
        missed = outside(family, measured(family, data_dir))
        if not missed:
            return
        misses.append(missed)
    pytest.fail(f"{MEASUREMENTS} measurements, each outside: {misses}")
