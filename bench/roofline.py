"""How close every neural model's training step is to this machine's limit.

    python -m bench.roofline [--models painn,schnet,...] [--batch-size 32] [--batches 3]
        [--threads 1]

Each model runs in its own process on the same `csd10k_density` training batches as
bench/models_throughput.py, and one training step (forward, loss, backward, optimizer
step) is measured three ways:

- floating-point operations, counted by `torch.utils.flop_counter.FlopCounterMode`
  (matrix products and convolutions; elementwise work is not counted, so GFLOP/s is
  the matmul work only);
- the bytes moved by gathers and scatters (index_select, gather, index, embedding,
  index_add, scatter_add, scatter_reduce, index_put), counted per call by a dispatch
  mode: a gather reads its output's rows and writes them (2 x output bytes), a scatter
  reads its source and updates its target rows (3 x source bytes), both read the index;
- the step's time and its split between matrix products, gathers/scatters and
  everything else (elementwise, reductions, dispatch), from torch.profiler's self
  times.

The machine's limits are measured in the same process with the same threads: the
matmul peak at the shape (and dtype) that carries most of the model's FLOPs and at a
large square, the bandwidth of a large copy, and of a row gather of the model's own
width. A model is "matmul-bound" when most of its step is matrix products, "gather/
scatter-bound" when most is indexing, and "overhead-bound" when most is small
elementwise operators (their count per step is printed: each costs microseconds of
dispatch whatever its size).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict

import torch
from torch.utils.flop_counter import FlopCounterMode

from bench import harness
from bench.flops import (
    TrafficCounter,
    dominant_matmul,
    matmul_gflops,
    tensor_bytes,
)
from bench.molecules import benchmark_batches, neural_models

DISPATCH_US = 20  # an operator call this short is mostly framework overhead
MATMUL_EVENTS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_mkl_")
INDEX_EVENTS = tuple(f"aten::{name}" for name in (
    "index_select", "gather", "index", "embedding", "index_add", "index_add_",
    "scatter_add", "scatter_add_", "scatter_reduce", "scatter_reduce_", "index_put",
    "index_put_", "_index_put_impl_", "embedding_dense_backward",
))  # fmt: skip


def copy_gbs(megabytes: int = 64, seconds=0.3) -> float:
    """Memory bandwidth of a large copy (read + write), GB/s."""
    source = torch.empty(megabytes * 2**20 // 4, dtype=torch.float32).uniform_()
    target = source.clone()  # touched: page faults are not bandwidth
    repeats, started = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        target.copy_(source)
        repeats += 1
    return 2 * tensor_bytes(source) * repeats / elapsed / 1e9


def gather_gbs(width: int, dtype: torch.dtype, rows=20_000, picks=200_000, seconds=0.3) -> float:
    """Bandwidth of random row gathers of `width` features (what an edge-wise message
    pass does to its node features), counted as `TrafficCounter` counts them."""
    table = torch.randn(rows, width, dtype=dtype)
    index = torch.randint(rows, (picks,))
    out = table.index_select(0, index)
    moved = 2 * tensor_bytes(out) + tensor_bytes(index)
    repeats, started = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        table.index_select(0, index)
        repeats += 1
    return moved * repeats / elapsed / 1e9


def measure(name: str, batch_size: int, n_batches: int) -> dict:
    """One model's roofline figures (run in a child process)."""
    from torch.profiler import ProfilerActivity, profile

    from oodmol.training.build import build_model, training_statistics

    cfg, dm, batches = benchmark_batches(name, batch_size, n_batches)
    model = build_model(cfg, training_statistics(cfg, dm))
    model.fit_target_scaling(dm.train_targets)
    optimizer = model.optimizer_factory(model.parameters())
    model.train()

    train_step = harness.training_step(model, optimizer)
    step_seconds, _ = harness.seconds_per_batch(lambda k: train_step(batches[k]), n_batches)

    flops, traffic = FlopCounterMode(display=False), TrafficCounter()
    with flops, traffic:
        for batch in batches[1:]:
            train_step(batch)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for batch in batches[1:]:
            train_step(batch)
    self_us = defaultdict(float)
    for event in prof.key_averages():
        if event.key.startswith(MATMUL_EVENTS):
            self_us["matmul"] += event.self_cpu_time_total
        elif event.key in INDEX_EVENTS:
            self_us["index"] += event.self_cpu_time_total
        else:
            self_us["other"] += event.self_cpu_time_total
    total_us = sum(self_us.values()) or 1.0

    batch, m, k, n, dtype = dominant_matmul(traffic)
    square = 1024 if dtype == torch.float32 else 512
    width = n if n > 1 else k
    return {
        "model": name,
        "dtype": str(dtype).removeprefix("torch."),
        "gflop_step": flops.get_total_flops() / n_batches / 1e9,
        "step_ms": 1e3 * step_seconds,
        "typical_shape": f"{batch}x{m}x{k}x{n}" if batch > 1 else f"{m}x{k}x{n}",
        "peak_shape_gflops": matmul_gflops(batch, m, k, n, dtype),
        "peak_square_gflops": matmul_gflops(1, square, square, square, dtype),
        "index_mb_step": (traffic.gather_bytes + traffic.scatter_bytes) / n_batches / 2**20,
        "copy_gbs": copy_gbs(),
        "gather_gbs": gather_gbs(width, dtype),
        "calls_step": traffic.calls / n_batches,
        "tensor_mb_step": traffic.tensor_bytes / n_batches / 2**20,
        "index_calls_step": traffic.index_calls / n_batches,
        "matmul_calls_step": traffic.matmul_calls / n_batches,
        "share": {key: value / total_us for key, value in self_us.items()},
    }


def bound(r: dict) -> str:
    """What limits the step: the largest share of its time, said with its figure.
    Operators other than products and indexing are elementwise work bound by memory
    when their average call is long, and dispatch overhead when it is short."""
    share = r["share"]
    kind = max(share, key=share.get)
    if kind == "matmul":
        return f"matmul ({100 * r['attained_shape']:.0f} % of its shape's peak)"
    if kind == "index":
        return f"gather/scatter ({r['index_gbs']:.2g} GB/s; row gathers {r['gather_gbs']:.2g})"
    if r["other_us_per_call"] > DISPATCH_US:
        return (
            f"elementwise memory traffic ({r['memory_gbs']:.2g} GB/s of "
            f"{r['copy_gbs']:.2g}; {r['other_us_per_call']:.0f} us per call)"
        )
    return f"dispatch overhead ({r['calls_step']:.0f} calls of {r['other_us_per_call']:.0f} us)"


def main() -> None:

    common = harness.options(models=",".join(neural_models()), batch_size=32, batches=3)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], parents=[common])
    parser.add_argument("--one", help=argparse.SUPPRESS)  # child process: one model
    args = parser.parse_args()
    harness.setup(args)
    if args.one:
        print(json.dumps(measure(args.one, args.batch_size, args.batches)))
        return

    rows = []
    for name in args.models.split(","):
        arguments = [
            "--one", name, "--batch-size", str(args.batch_size),
            "--batches", str(args.batches), "--threads", str(args.threads),
        ]  # fmt: skip
        if args.default_malloc:
            arguments.append("--default-malloc")
        r = harness.run_child("bench.roofline", arguments)
        if "failed" in r:
            print(f"{name}: failed ({r['failed']})", file=sys.stderr)
            continue
        seconds = r["step_ms"] / 1e3
        r["gflops"] = r["gflop_step"] / seconds
        r["attained_shape"] = r["gflops"] / r["peak_shape_gflops"]
        r["attained_square"] = r["gflops"] / r["peak_square_gflops"]
        index_seconds = r["share"].get("index", 0.0) * seconds
        r["index_gbs"] = r["index_mb_step"] * 2**20 / 1e9 / index_seconds if index_seconds else 0.0
        r["memory_gbs"] = r["tensor_mb_step"] * 2**20 / 1e9 / seconds
        other_calls = max(r["calls_step"] - r["matmul_calls_step"] - r["index_calls_step"], 1)
        r["other_us_per_call"] = 1e6 * r["share"].get("other", 0.0) * seconds / other_calls
        rows.append(r)

    print(
        f"\ncsd10k_density training molecules, batch {args.batch_size}, one training step "
        f"averaged over {args.batches} batches, {args.threads} torch thread(s), "
        f"{torch.__version__}"
    )
    print(
        "| model | dtype | GFLOP/step | step ms | GFLOP/s | peak at its shape (GFLOP/s) | "
        "% of shape peak | % of square peak | gather+scatter MB/step | aten calls/step | "
        "time matmul / index / other % | bound |"
    )
    print("|" + "---|" * 12)
    for r in sorted(rows, key=lambda r: -r["step_ms"]):
        share = r["share"]
        print(
            f"| {r['model']} | {r['dtype']} | {r['gflop_step']:.3g} | {r['step_ms']:.0f} | "
            f"{r['gflops']:.3g} | {r['peak_shape_gflops']:.3g} ({r['typical_shape']}) | "
            f"{100 * r['attained_shape']:.0f} | {100 * r['attained_square']:.0f} | "
            f"{r['index_mb_step']:.0f} | {r['calls_step']:.0f} | "
            f"{100 * share.get('matmul', 0):.0f} / {100 * share.get('index', 0):.0f} / "
            f"{100 * share.get('other', 0):.0f} | {bound(r)} |"
        )
    if rows:
        print(
            f"machine: copy {rows[0]['copy_gbs']:.3g} GB/s; matmul peak at a large square "
            f"{max(r['peak_square_gflops'] for r in rows):.3g} GFLOP/s"
        )
    for r in rows:
        print(
            f"model={r['model']} gflop_step={r['gflop_step']:.4g} step_ms={r['step_ms']:.1f} "
            f"attained_shape={r['attained_shape']:.3f} index_mb={r['index_mb_step']:.1f}"
        )


if __name__ == "__main__":
    main()
