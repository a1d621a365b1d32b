"""What a worker pool costs to start in a process that imported Lightning (as every run
does): `oodmol.parallel.process_map` over a few molecules with forked workers against
workers from a fork server, side by side in one process.

    python -m bench.pool_start [--pools 3] [--workers 2]

A fork server's worker re-imports the main module (Python 3.11's fork server does not
preload it), so its cost is the seconds of the main module's imports, once per worker of
every pool; a forked worker is a copy of this process. Columns: seconds per pool (each
pool maps four molecules to Morgan bits), median and max over `--pools` pools.
"""

from __future__ import annotations

import argparse
import statistics
import time

import lightning  # noqa: F401  (what a run has imported before its pools start)

import oodmol.parallel
from oodmol.data.featurize.base import MolInput
from oodmol.data.featurize.fingerprints import MorganFingerprint


def pool_seconds(method: str, pools: int, workers: int) -> list[float]:
    chosen = oodmol.parallel.start_method
    oodmol.parallel.start_method = lambda: method
    featurizer = MorganFingerprint(n_bits=64)
    molecules = [MolInput(s) for s in ("CCO", "c1ccccc1", "CC(=O)O", "CCN")]
    seconds = []
    try:
        for _ in range(pools):
            start = time.perf_counter()
            list(
                oodmol.parallel.process_map(
                    featurizer, molecules, len(molecules), "", n_jobs=workers, progress=False
                )
            )
            seconds.append(time.perf_counter() - start)
    finally:
        oodmol.parallel.start_method = chosen
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    print(f"start method the run uses: {oodmol.parallel.start_method()}")
    print("| start method | pools | s per pool, median | max |")
    print("|---|---|---|---|")
    medians = {}
    for method in ("fork", "forkserver"):
        seconds = pool_seconds(method, args.pools, args.workers)
        medians[method] = statistics.median(seconds)
        print(f"| {method} | {args.pools} | {medians[method]:.2f} | {max(seconds):.2f} |")
    print(f"forkserver / fork: {medians['forkserver'] / medians['fork']:.0f}x")


if __name__ == "__main__":
    main()
