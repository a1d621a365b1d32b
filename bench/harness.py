"""What the benches share: their common options, thread and allocator setup, child
processes, and the reference benches' measurement loop and table.

A reference bench (`bench.pyg_reference`, `bench.painn_et_reference`,
`bench.gotennet_reference`, `bench.mace_reference`) is only its measurement: a `Reference`
naming its models and sides, the batches every side of a model shares (`setup`) and what
one side does for one step (`build`, a `Side`); `main` does the rest:

    python -m bench.<name> [--models a,b] [--threads 1] [--batch-size B] [--batches N]
        [--repeats R] [--default-malloc] [the bench's own options]

The parent runs every (model, side) in a child process of its own (the same command with
`--one MODEL SIDE`, so each side's peak memory is its own), the sides of one model taking
turns `--repeats` times so that a change in the machine's load hits them alike, every
repeat of one model before the next. A child sets the torch threads and, unless
`--default-malloc`, keeps freed memory as train.py does (`oodmol.allocator`), builds the
side after its shared batches (the memory baseline lies between, and the seed is 0),
then, in this order: one warm-up training step and `--batches` timed ones (train mode);
as many forward passes without gradients after a warm-up one (eval mode), where the side
has them; its neighbour search over the timed batches, where it has one; for ours (the
first side), the FLOPs floor of its training step (`bench.flops.matmul_floor_ms`);
its peak resident memory over the baseline. Its last line of output is its figures, as
JSON. Rates are molecules per second of the bench's clock (wall, or the process's CPU
time), as is `step_ms`; the wall-clock rates are kept beside.

The table has one row per model and side: medians over the runs (peak memory: the
largest). The last lines are, per model,
``model=<name> reference_ratio=<...> [wall_ratio=<...>] ceiling_ratio=<...> [<side>_ratio=<...>]``:
the ratio of training molecules per second, ours over the reference (the last side),
i.e. the reference's step time over ours; with a CPU clock the same ratio of wall-clock
rates; the reference's median step time over our median FLOPs floor, the largest
reference_ratio our FLOPs allow; and for each side between ours and the reference (a
variant of ours, e.g. compiled) its rate over the reference's.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.flops import matmul_floor_ms
from bench.molecules import benchmark_batches

REPO = Path(__file__).resolve().parents[1]


def options(
    *,
    models: str | None = None,
    batch_size: int | None = None,
    batches: int | None = None,
    repeats: int | None = None,
) -> argparse.ArgumentParser:
    """The options the benches share, as an argparse parent parser: `--threads` and
    `--default-malloc` always; `--models`, `--batch-size`, `--batches` and `--repeats`
    where the bench gives them its default."""
    parent = argparse.ArgumentParser(add_help=False)
    if models is not None:
        parent.add_argument("--models", default=models, help="comma-separated")
    parent.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    if batch_size is not None:
        parent.add_argument("--batch-size", type=int, default=batch_size)
    if batches is not None:
        parent.add_argument(
            "--batches", type=int, default=batches, help="timed batches after a warm-up one"
        )
    if repeats is not None:
        parent.add_argument(
            "--repeats", type=int, default=repeats, help="runs of each side, taking turns"
        )
    parent.add_argument(
        "--default-malloc",
        action="store_true",
        help="glibc's default allocator, without oodmol.allocator.keep_freed_memory",
    )
    return parent


def setup(args: argparse.Namespace) -> None:
    """The torch threads of `--threads`, and freed memory kept as train.py keeps it
    (`keep_freed_memory: true`: the step without page-fault churn) unless
    `--default-malloc`."""
    import torch

    from oodmol.allocator import keep_freed_memory

    torch.set_num_threads(args.threads)
    if not args.default_malloc:
        keep_freed_memory()


def rss_mb() -> float:
    """This process's peak resident set size so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_child(module: str, arguments: Sequence[str], threads: int | None = None) -> dict:
    """`python -m <module> <arguments>` in a process of its own, from the repository root
    (with OMP_NUM_THREADS=`threads` where given): the JSON figures it prints last, or
    `{"failed": <why>, "stderr": <its last 3,000 characters>}`."""
    env = os.environ | ({"OMP_NUM_THREADS": str(threads)} if threads else {})
    command = [sys.executable, "-m", module, *arguments]
    out = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=env)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        why = "killed: out of memory?" if out.returncode in (-9, 137) else last
        return {"failed": f"exit {out.returncode} ({why})", "stderr": out.stderr[-3000:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def turns(cases: Sequence[Any], repeats: int) -> Iterator[Any]:
    """The cases taking turns `repeats` times: A, B, A, B, ..."""
    for _ in range(repeats):
        yield from cases


def alternating_runs(
    module: str, cases: list[tuple[str, ...]], repeats: int, threads: int, options: list[str]
) -> dict[tuple[str, ...], list[dict]]:
    """Each case (the `--one` arguments of `python -m <module>`, followed by `options`) in
    a process of its own, the cases taking turns `repeats` times so that a change in the
    machine's load hits all alike: the figures of each run, per case. A failed run stops
    the bench."""
    runs: dict[tuple[str, ...], list[dict]] = {case: [] for case in cases}
    for case in turns(cases, repeats):
        arguments = ["--one", *case, "--threads", str(threads), *options]
        figures = run_child(module, arguments, threads)
        if "failed" in figures:
            sys.exit(f"{' '.join(case)} failed:\n{figures['stderr']}")
        runs[case].append(figures)
        print(f"[bench] {figures}   load {os.getloadavg()[0]:.2f}", flush=True)
    return runs


def seconds_per_batch(step: Callable[[int], object], n_batches: int) -> tuple[float, float]:
    """Wall-clock and CPU seconds of this process per call of `step(k)` for batches
    k = 1..n_batches, after a warm-up call on batch 0 (allocations, lazy initialisation)."""
    step(0)
    wall, cpu = time.perf_counter(), time.process_time()
    for k in range(1, n_batches + 1):
        step(k)
    return (time.perf_counter() - wall) / n_batches, (time.process_time() - cpu) / n_batches


def optimiser_step(optimizer, loss: Callable[[Any], Any]) -> Callable[[Any], None]:
    """One training step on `x` (a batch, or its index): `loss(x)`, backward and the
    optimiser's step."""

    def step(x: Any) -> None:
        optimizer.zero_grad(set_to_none=True)
        loss(x).backward()
        optimizer.step()

    return step


def training_step(model, optimizer) -> Callable[[Any], None]:
    """One training step as the benches time it: the model's own training loss (its
    `training_step`, which logs nothing without a trainer), backward and the optimiser's
    step."""
    return optimiser_step(optimizer, lambda batch: model.training_step(batch, 0))


def shared_batches(args: argparse.Namespace, model: str) -> tuple:
    """What the sides of a model share by default: `model=<model>`'s composed config,
    datamodule and the `--batches` + 1 batches of every bench's molecules
    (`bench.molecules.benchmark_batches`); our neighbour search is the pure-torch
    one, as in the project's environment (no torch-cluster)."""
    import oodmol.models.neighbors as neighbors

    neighbors.HAS_TORCH_CLUSTER = False
    return benchmark_batches(model, args.batch_size, args.batches)


@dataclass
class Side:
    """One side of a reference bench, built for one model: its module (put in train mode
    to train and eval mode to predict), its batches (the first is the warm-up; their atoms
    are counted) and what it does with batch k."""

    module: Any
    batches: list
    train: Callable[[int], object]  # one training step: forward, loss, backward, optimiser
    infer: Callable[[int], object] | None = None  # a forward pass (run without gradients)
    search: Callable[[int], object] | None = None  # a neighbour search, timed apart
    figures: dict = field(default_factory=dict)  # the bench's own, reported as they are


@dataclass(frozen=True)
class Column:
    """A table column: its header and its text from a model's name, a side and the
    side's runs."""

    header: str
    text: Callable[[str, str, list[dict]], str]


def model_column(header: str = "model") -> Column:
    return Column(header, lambda model, side, runs: model)


def side_column(header: str = "side") -> Column:
    return Column(header, lambda model, side, runs: side)


def median_column(header: str, key: str, spec: str, scale: float = 1.0) -> Column:
    """The median over the runs of `key` (times `scale`), formatted by `spec`."""
    return Column(header, lambda model, side, runs: f"{median(runs, key) * scale:{spec}}")


def first_column(header: str, key: str, spec: str) -> Column:
    """`key` of the first run (a figure every run shares, such as atoms per batch)."""
    return Column(header, lambda model, side, runs: f"{runs[0][key]:{spec}}")


def peak_column(header: str = "peak MB") -> Column:
    """The largest peak memory of the runs."""
    return Column(header, lambda model, side, runs: f"{max(r['peak_mb'] for r in runs):.0f}")


def median(runs: Iterable[dict], key: str) -> float:
    return float(statistics.median(run[key] for run in runs))


def ceiling_ratio(reference_runs: list[dict], our_runs: list[dict]) -> float:
    """The largest reference_ratio ours could reach at its FLOPs: the reference's median
    step time over our median `floor_ms` (`bench.flops.matmul_floor_ms`)."""
    return median(reference_runs, "step_ms") / median(our_runs, "floor_ms")


def default_sides(args: argparse.Namespace) -> tuple[str, ...]:
    return ("ours", "reference")


@dataclass(frozen=True)
class Reference:
    """A reference bench: ours against another implementation, side by side.

    `setup(args, model)` returns what every side of `model` shares (by default
    `shared_batches`: config, datamodule, batches), made before the memory baseline;
    `build(args, model, side, shared)` returns the `Side`. `sides(args)` names them: ours
    first, the reference last, any between (variants of ours) get a `<side>_ratio`."""

    module: str  # how a child runs it: python -m <module>
    doc: str
    models: tuple[str, ...]
    build: Callable[[argparse.Namespace, str, str, Any], Side]
    columns: tuple[Column, ...]
    setup: Callable[[argparse.Namespace, str], Any] = shared_batches
    batch_size: int = 32
    batches: int = 4
    repeats: int = 2
    sides: Callable[[argparse.Namespace], tuple[str, ...]] = default_sides
    add_options: Callable[[argparse.ArgumentParser], None] | None = None
    clock: str = "wall"  # or "cpu": rates per CPU second of the process
    molecules: str = "csd10k_density training molecules"


def measure(bench: Reference, args: argparse.Namespace, model: str, side: str) -> dict:
    """One side's figures (in a child process), as the module docstring says."""
    import numpy as np
    import torch

    shared = bench.setup(args, model)
    baseline = rss_mb()
    torch.manual_seed(0)
    built = bench.build(args, model, side, shared)
    n, size = args.batches, args.batch_size
    clock = 1 if bench.clock == "cpu" else 0
    built.module.train()
    train = seconds_per_batch(built.train, n)
    figures = {
        "model": model,
        "side": side,
        "floor_ms": None,
        "train_mol_s": size / train[clock],
        "step_ms": 1e3 * train[clock],
        "wall_train_mol_s": size / train[0],
    }
    if built.infer is not None:
        built.module.eval()
        with torch.no_grad():
            infer = seconds_per_batch(built.infer, n)
        figures |= {"infer_mol_s": size / infer[clock], "wall_infer_mol_s": size / infer[0]}
    if built.search is not None:
        started = time.perf_counter()
        for k in range(1, n + 1):
            built.search(k)
        figures["search_ms"] = 1e3 * (time.perf_counter() - started) / n
    if side == bench.sides(args)[0]:
        built.module.train()
        figures["floor_ms"] = matmul_floor_ms(lambda: [built.train(k) for k in range(1, n + 1)], n)
    figures["peak_mb"] = rss_mb() - baseline
    figures["atoms_per_batch"] = float(np.mean([len(b.z) for b in built.batches[1:]]))
    return figures | built.figures


def print_table(
    bench: Reference, args: argparse.Namespace, runs: dict[tuple[str, str], list[dict]]
) -> None:
    """The medians per model and side, then each model's ratios (the module docstring)."""
    import torch

    models = list(dict.fromkeys(model for model, _ in runs))
    sides = bench.sides(args)
    ours, reference = sides[0], sides[-1]
    atoms = runs[models[0], ours][0]["atoms_per_batch"]
    print(
        f"\n{bench.molecules}, batch {args.batch_size} (~{atoms:.0f} atoms), {args.batches} "
        f"steps after a warm-up, median of {args.repeats} runs, {args.threads} torch "
        f"thread(s), torch {torch.__version__}, load {os.getloadavg()[0]:.2f}"
    )
    print("| " + " | ".join(column.header for column in bench.columns) + " |")
    print("|" + "---|" * len(bench.columns))
    for (model, side), results in runs.items():
        print("| " + " | ".join(c.text(model, side, results) for c in bench.columns) + " |")
    for model in models:
        rate = {side: median(runs[model, side], "train_mol_s") for side in sides}
        line = f"model={model} reference_ratio={rate[ours] / rate[reference]:.2f}"
        if bench.clock == "cpu":
            wall = {side: median(runs[model, side], "wall_train_mol_s") for side in sides}
            line += f" wall_ratio={wall[ours] / wall[reference]:.2f}"
        ceiling = ceiling_ratio(runs[model, reference], runs[model, ours])
        line += f" ceiling_ratio={ceiling:.2f}"
        for side in sides[1:-1]:
            line += f" {side}_ratio={rate[side] / rate[reference]:.2f}"
        print(line)


def main(bench: Reference, argv: list[str] | None = None) -> None:
    """The bench's command line: the parent's table, or with `--one MODEL SIDE` (hidden)
    a child's figures."""
    argv = sys.argv[1:] if argv is None else argv
    common = options(
        models=",".join(bench.models),
        batch_size=bench.batch_size,
        batches=bench.batches,
        repeats=bench.repeats,
    )
    parser = argparse.ArgumentParser(
        prog=f"python -m {bench.module}", description=bench.doc.split("\n\n")[0], parents=[common]
    )
    if bench.add_options:
        bench.add_options(parser)
    parser.add_argument("--one", nargs=2, metavar=("MODEL", "SIDE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    setup(args)
    if args.one:
        print(json.dumps(measure(bench, args, *args.one)))
        return
    names = args.models.split(",")
    if unknown := set(names) - set(bench.models):
        sys.exit(f"unknown models {sorted(unknown)}; choose from {bench.models}")
    runs: dict[tuple[str, ...], list[dict]] = {}
    for name in names:  # every repeat of one model before the next
        cases = [(name, side) for side in bench.sides(args)]
        runs |= alternating_runs(bench.module, cases, args.repeats, args.threads, argv)
    print_table(bench, args, runs)
