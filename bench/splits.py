"""Time the eight QM9 OOD splits computed afresh; with --reference, time scikit-learn's
KernelDensity on one property side by side and check both pick the same OOD molecules.

    python -m bench.splits                 # last line: qm9_ood_splits_seconds=<total>
    python -m bench.splits --reference     # + scikit-learn on qm9_homo (~17 min here)
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
from hydra.utils import instantiate
from sklearn.neighbors import KernelDensity

from oodmol.config import benchmark_tasks, compose_config
from oodmol.data.task import load_task

QM9_TASKS = benchmark_tasks("boom", "qm9")  # BOOM's QM9 properties, from their YAMLs


def ours(task_name: str, data_dir: Path) -> tuple[float, np.ndarray, object]:
    """Seconds for one OOD split, from opening the validated QM9 table to the leakage
    check (no split file is read or written)."""
    cfg = compose_config("data", [f"task={task_name}", "split=ood"])
    start = time.perf_counter()
    data = load_task(instantiate(cfg.task), data_dir, progress=False)
    splitter = instantiate(cfg.split)
    split = splitter.split(data.table, data.task.target)
    split.check_no_leakage(data.table)
    return time.perf_counter() - start, split.sets["ood"], data


def reference(data, n_ood: int) -> tuple[float, np.ndarray]:
    """scikit-learn's exact KDE (BOOM's call), ranked by log-density then molecule id."""
    y = data.y[:, None]
    start = time.perf_counter()
    scores = KernelDensity(kernel="gaussian", bandwidth="scott").fit(y).score_samples(y)
    seconds = time.perf_counter() - start
    chosen = np.lexsort((data.table.mol_id, scores))[:n_ood]
    return seconds, np.sort(data.table.mol_id[chosen])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", action="store_true", help="also time scikit-learn")
    parser.add_argument("--reference-task", default="qm9_homo")
    args = parser.parse_args()
    data_dir = Path(os.environ.get("OODMOL_DATA_DIR", "data"))
    load_task(instantiate(compose_config("data", ["task=qm9_homo"]).task), data_dir)  # warm
    total, per_task = 0.0, {}
    for name in QM9_TASKS:
        seconds, ood, data = ours(name, data_dir)
        per_task[name] = (seconds, ood, data)
        total += seconds
        print(f"{name}: {seconds:.2f} s ({len(ood)} OOD of {len(data.table)})")
    if args.reference:
        seconds, ood, data = per_task[args.reference_task]
        sk_seconds, sk_ood = reference(data, len(ood))
        same = np.array_equal(np.sort(ood), sk_ood)
        print(
            f"{args.reference_task}: scikit-learn {sk_seconds:.1f} s, oodmol {seconds:.2f} s, "
            f"same OOD set: {same}"
        )
        print(f"reference_ratio={sk_seconds / seconds:.0f}")
    print(f"qm9_ood_splits_seconds={total:.2f}")


if __name__ == "__main__":
    main()
