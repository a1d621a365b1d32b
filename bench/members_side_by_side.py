"""Ensemble members in turn against side by side (`uq.parallel`), the same run otherwise.

    python -m bench.members_side_by_side [--model chemprop] [--task lipophilicity]
        [--members 2] [--threads 2] [--epochs 3] [--max-molecules 400] [--repeats 1]
        [--device cpu|cuda] [train.py overrides ...]

Each repeat trains the ensemble twice into fresh folders, in alternating order: its
members one after another, each on all `--threads`, then `--members` at once, each on
`threads / members` (on a GPU, sharing it). It prints the wall-clock seconds of both and
their ratio, `side_by_side_ratio=<in turn / side by side>` (above 1: side by side is
faster), and the largest difference of their combined predictions (0 at equal thread
counts; at different counts float sums may round differently). The data set and its
feature cache are built first, once, outside the timing.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from bench.harness import REPO


def train(args: argparse.Namespace, out: Path, data_dir: Path, *extra: str) -> float:
    """One ensemble run of train.py into `out`; its wall-clock seconds."""
    trainer = "gpu" if args.device == "cuda" else "cpu"
    command = [
        sys.executable, "train.py", f"model={args.model}", f"task={args.task}",
        f"max_molecules={args.max_molecules}", f"model.max_epochs={args.epochs}",
        f"trainer={trainer}", "uq=ensemble", f"uq.members={args.members}",
        f"threads={args.threads}", "progress=false", "logger=csv", f"paths.data_dir={data_dir}",
        f"hydra.run.dir={out}", *args.overrides, *extra,
    ]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode:
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise SystemExit(f"members_side_by_side: {out.name} failed: {last[0]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="chemprop")
    parser.add_argument("--task", default="lipophilicity")
    parser.add_argument("--members", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--max-molecules", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("overrides", nargs="*", help="train.py overrides for every run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        data_dir = root / "data"
        train(args, root / "warm-up", data_dir, "uq.members=1", "model.max_epochs=1")
        times: dict[str, list[float]] = {"in turn": [], "side by side": []}
        largest = 0.0
        for repeat in range(args.repeats):
            order = ["in turn", "side by side"][:: 1 if repeat % 2 == 0 else -1]
            outs = {}
            for way in order:
                outs[way] = root / f"{way.replace(' ', '_')}-{repeat}"
                extra = [f"uq.parallel={args.members}"] if way == "side by side" else []
                times[way].append(train(args, outs[way], data_dir, *extra))
            preds = [pd.read_csv(outs[way] / "predictions.csv")["y_pred"] for way in times]
            largest = max(largest, float((preds[0] - preds[1]).abs().max()))
    print("| way | threads per member | wall s (median) | runs |\n|---|---|---|---|")
    for way, seconds in times.items():
        threads = args.threads if way == "in turn" else max(1, args.threads // args.members)
        print(f"| {way} | {threads} | {statistics.median(seconds):.1f} | {len(seconds)} |")
    ratio = statistics.median(times["in turn"]) / statistics.median(times["side by side"])
    print(f"model={args.model} side_by_side_ratio={ratio:.2f} largest_difference={largest:.3g}")


if __name__ == "__main__":
    main()
