"""Training and inference throughput, peak memory and data-path share of every neural
model, on the same batches of `csd10k_density` (or `--task`) training molecules, as one
table; and the rate of conformer generation.

    python -m bench.models_throughput [--models mlp,chemprop,...] [--batch-size 32]
        [--batches 8] [--threads 1] [--profile 3] [--conformers 200] [--compile]
        [--device cuda] [--epochs]

Each model runs in its own process (so its peak memory is its own): its config is
composed as train.py composes it (`task=<task> split=ood`, the model's published
sizes), its features come from the project's caches (built on first use), and it is
timed on the same molecules, in the same order, for `--batches` batches after one
warm-up batch. Columns:

- train mol/s: the model's own training loss (`training_step`), backward, optimiser step;
- infer mol/s: its prediction as evaluation makes it (`predict_batch`, no gradients);
- peak MB: the process's peak resident memory minus its resident memory before the
  model was built (CPU); on CUDA the peak of allocated tensor memory;
- data %: share of a training step spent building the batch (collation) and, for
  models with a `cutoff`, searching neighbours (timed apart on the same batches).

`--compile` measures every model a second time with its backbone compiled
(`model.module.compile_backbone=true`), on the same batches, and prints both training
rates, their ratio, the compile time (the warm-up batch's extra seconds) and whether the
seconds an epoch of the task's training set saves win it back.

`--epochs` adds seconds per epoch on the task's data set (training set at the training
rate, validation set at the inference rate, each model at its own batch size, measured
again) beside BOOM's Table 4 for the same data set, as `--device cuda` on a GPU node
compares with BOOM's GPUs: run it with `--task csd10k_density` and `--task qm9_homo`.

`--profile N` prints torch.profiler's top operators for the N slowest models in
training. The last table line per model is `model=<name> train=<mol/s> ...` for
scripts. Random forests are not batch models and are left out.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from lightning.fabric.utilities.apply_func import move_data_to_device

from bench import harness
from bench.harness import rss_mb
from bench.molecules import benchmark_setup, graph3d_featurizer, neural_models
from oodmol.data.batches import PointCloudBatch


def measure(
    name: str,
    batch_size: int,
    n_batches: int,
    profile: bool,
    device: str,
    compile: bool = False,
    task: str = "csd10k_density",
) -> dict:
    """One model's figures (run in a child process)."""
    from oodmol.models.neighbors import radius_graph
    from oodmol.training.build import build_model, training_statistics

    cfg, dm, batches_idx = benchmark_setup(name, batch_size, n_batches, task)
    dataset = dm.datasets["train"]
    collate_started = time.perf_counter()
    batches = [dm.features.collate(dataset.__getitems__(idx)) for idx in batches_idx]
    collate_seconds = (time.perf_counter() - collate_started) / len(batches)

    device = torch.device(device)
    on_cuda = device.type == "cuda"
    batches = [move_data_to_device(batch, device) for batch in batches]
    baseline = rss_mb()
    if on_cuda:
        torch.cuda.reset_peak_memory_stats(device)
    model = build_model(cfg, training_statistics(cfg, dm)).to(device)
    if compile:
        if not hasattr(model, "compile_backbone"):
            raise ValueError(f"{type(model).__name__} has no compile_backbone option")
        model.compile_backbone = True
    model.fit_target_scaling(dm.train_targets)
    optimizer = model.optimizer_factory(model.parameters())

    train_step = harness.training_step(model, optimizer)
    warm_up = []

    def seconds_per_batch(step) -> float:
        started = time.perf_counter()
        step(batches[0])  # warm-up: allocations, lazy initialisation, compilation
        if on_cuda:
            torch.cuda.synchronize(device)
        warm_up.append(time.perf_counter() - started)
        started = time.perf_counter()
        for batch in batches[1:]:
            step(batch)
        if on_cuda:
            torch.cuda.synchronize(device)
        return (time.perf_counter() - started) / n_batches

    model.train()
    train_seconds = seconds_per_batch(train_step)
    model.eval()
    with torch.no_grad():
        infer_seconds = seconds_per_batch(model.predict_batch)  # as evaluation predicts

    neighbour_seconds = 0.0
    cutoff = getattr(model.backbone, "cutoff", None)
    if cutoff and isinstance(batches[0], PointCloudBatch):
        max_neighbors = getattr(model.backbone, "max_neighbors", 32)
        started = time.perf_counter()
        for batch in batches[1:]:
            radius_graph(batch.pos, batch.molecule, cutoff, max_neighbors)
        neighbour_seconds = (time.perf_counter() - started) / n_batches

    result = {
        "model": name,
        "params": model.n_params(),
        "train_mol_s": batch_size / train_seconds,
        "infer_mol_s": batch_size / infer_seconds,
        "peak_mb": torch.cuda.max_memory_allocated(device) / 2**20
        if on_cuda
        else rss_mb() - baseline,
        "data_share": (collate_seconds + neighbour_seconds) / train_seconds,
        "collate_ms": 1e3 * collate_seconds,
        "neighbours_ms": 1e3 * neighbour_seconds,
        "step_ms": 1e3 * train_seconds,
        "compile_s": warm_up[0] - train_seconds if compile else 0.0,
    }
    if profile:
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as torch_profile

        with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
            for batch in batches[1:3]:
                train_step(batch)
        result["profile"] = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=8)
    return result


def conformer_rate(n: int) -> dict:
    """Seconds per 1,000 molecules of ETKDG + MMFF94 conformers on one core, on the
    first `n` molecules of the 10k set, and the routes (fallbacks) and failures of the
    whole set's cached conformers."""
    from hydra.utils import instantiate

    from oodmol.config import compose_config
    from oodmol.data.featurize.base import inputs_of
    from oodmol.data.featurize.conformers import ConformerMethod
    from oodmol.data.store import FeatureStore
    from oodmol.data.task import load_task

    cfg = compose_config("train", ["task=csd10k_density", "progress=false"])
    table = load_task(instantiate(cfg.task), Path(cfg.paths.data_dir), progress=False).dataset
    inputs = inputs_of(table, np.arange(min(n, len(table))))
    featurizer = graph3d_featurizer()
    started = time.perf_counter()
    for mol in inputs:
        featurizer(mol)
    seconds = time.perf_counter() - started
    store = FeatureStore.build_or_open(
        featurizer, table, Path(cfg.paths.data_dir) / "features", progress=False
    )
    routes = Counter(
        (ConformerMethod(int(a["conformer"][0])).name, bool(a["conformer"][1]))
        for a in store.iter_arrays(np.setdiff1d(table.mol_id, list(store.failed)))
    )
    return {
        "molecules": len(inputs),
        "seconds_per_1000": 1000 * seconds / len(inputs),
        "routes": {f"{m}, {'' if ok else 'not '}converged": n for (m, ok), n in routes.items()},
        "failed": store.failed,
        "cache_build_seconds": store.meta["build_seconds"],
    }


def print_compile_gains(rows: list[dict], args, child: Callable[..., dict]) -> None:
    """Eager against compiled training rates, the compile time, and whether compiling
    pays for itself within one epoch of `args.task` (its training set, this batch size)."""
    from bench.grid_cost import run_shape

    print(
        "\n| model | eager train mol/s | compiled train mol/s | ratio | compile s "
        "| epoch s saved | pays in one epoch |"
    )
    print("|" + "---|" * 7)
    for r in rows:
        c = child(r["model"], compiled=True)
        if "failed" in c:
            print(f"| {r['model']} | {r['train_mol_s']:.3g} | failed: {c['failed']} |||||")
            continue
        n_train = run_shape(r["model"], args.task, "default")["train"]
        saved = n_train * (1 / r["train_mol_s"] - 1 / c["train_mol_s"])
        print(
            f"| {r['model']} | {r['train_mol_s']:.3g} | {c['train_mol_s']:.3g} | "
            f"{c['train_mol_s'] / r['train_mol_s']:.2f} | {c['compile_s']:.0f} | "
            f"{saved:.0f} | {'yes' if saved > c['compile_s'] else 'no'} |"
        )


def print_epoch_times(models: list[str], args, child: Callable[..., dict]) -> None:
    """Seconds per epoch of each model on `args.task`'s data set, at the model's own batch
    size, beside BOOM's Table 4 seconds for that data set and the GPU BOOM used."""
    from bench.grid_cost import BOOM_SECONDS, data_set, epoch_seconds, run_shape
    from oodmol.report.boom_reference import boom_paper

    table4 = boom_paper().tables["table4"].set_index("model")
    family = data_set(args.task)
    print(
        f"\n{family} epoch (train + validation sets of {args.task}), ours on {args.device}, "
        f"{args.threads} thread(s); BOOM's Table 4"
    )
    print("| model | batch | ours s/epoch | BOOM s/epoch | BOOM's GPU | BOOM / ours |")
    print("|" + "---|" * 6)
    for name in models:
        shape = run_shape(name, args.task, "default")
        rates = child(name, batch_size=shape["batch_size"])
        if "failed" in rates:
            print(f"| {name} | {shape['batch_size']} | failed: {rates['failed']} ||||")
            continue
        ours = epoch_seconds(shape, rates)
        boom = table4.loc[name] if name in table4.index and family in BOOM_SECONDS else None
        theirs = "—" if boom is None else f"{boom[BOOM_SECONDS[family]]:.3g}"
        ratio = "—" if boom is None else f"{boom[BOOM_SECONDS[family]] / ours:.2g}"
        device = "—" if boom is None else boom["device"]
        print(f"| {name} | {shape['batch_size']} | {ours:.3g} | {theirs} | {device} | {ratio} |")


def main() -> None:
    common = harness.options(models=",".join(neural_models()), batch_size=32, batches=8)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], parents=[common])
    parser.add_argument("--profile", type=int, default=3, help="profile the N slowest")
    parser.add_argument("--conformers", type=int, default=200)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--compile", action="store_true", help="also with compiled backbones")
    parser.add_argument("--task", default="csd10k_density", help="whose training molecules")
    parser.add_argument("--epochs", action="store_true", help="epoch seconds beside BOOM's")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # child process: one model
    parser.add_argument("--with-profile", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--compiled", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    harness.setup(args)
    warnings.filterwarnings("ignore", message=".*self.log.*")  # no trainer in a bench
    if args.one:
        figures = measure(
            args.one,
            args.batch_size,
            args.batches,
            args.with_profile,
            args.device,
            args.compiled,
            args.task,
        )
        print(json.dumps(figures))
        return

    def child(
        name: str, with_profile: bool = False, compiled: bool = False, batch_size: int = 0
    ) -> dict:
        arguments = [
            "--one", name, "--batch-size", str(batch_size or args.batch_size),
            "--batches", str(args.batches), "--threads", str(args.threads),
            "--device", args.device, "--task", args.task,
        ]  # fmt: skip
        if args.default_malloc:
            arguments.append("--default-malloc")
        if with_profile:
            arguments.append("--with-profile")
        if compiled:
            arguments.append("--compiled")
        return {"model": name} | harness.run_child("bench.models_throughput", arguments)

    results = [child(name) for name in args.models.split(",")]
    rows = [r for r in results if "failed" not in r]
    print(
        f"\n{args.task} training molecules, batch {args.batch_size}, {args.batches} "
        f"batches after a warm-up, {args.threads} torch thread(s), {torch.__version__}, "
        f"device {args.device}"
    )
    header = "| model | params | train mol/s | infer mol/s | peak MB | data % | step ms |"
    print(header + "\n|" + "---|" * 7)
    for r in sorted(rows, key=lambda r: -r["train_mol_s"]):
        print(
            f"| {r['model']} | {r['params']:,} | {r['train_mol_s']:.3g} | "
            f"{r['infer_mol_s']:.3g} | {r['peak_mb']:.0f} | {100 * r['data_share']:.1f} | "
            f"{r['step_ms']:.1f} |"
        )
    for r in results:
        if "failed" in r:
            print(f"| {r['model']} | failed: {r['failed']} |||||")
    if args.compile:
        print_compile_gains(rows, args, child)
    if args.epochs:
        print_epoch_times([r["model"] for r in rows], args, child)
    for r in sorted(rows, key=lambda r: r["train_mol_s"])[: args.profile]:
        profiled = child(r["model"], with_profile=True)
        if "failed" in profiled:
            continue
        print(
            f"\n## {r['model']}: step {profiled['step_ms']:.1f} ms, collation "
            f"{profiled['collate_ms']:.2f} ms, neighbour search {profiled['neighbours_ms']:.2f} ms"
        )
        print(profiled["profile"])
    if args.conformers:
        rate = conformer_rate(args.conformers)
        print(
            f"conformers: {rate['seconds_per_1000']:.0f} s per 1,000 molecules (ETKDG + MMFF94, "
            f"one core, first {rate['molecules']} molecules of the 10k set); the cache of all "
            f"{sum(rate['routes'].values()) + len(rate['failed'])} took "
            f"{rate['cache_build_seconds']:.0f} s on every core"
        )
        for route, n in sorted(rate["routes"].items()):
            print(f"  {route}: {n}")
        print(f"  failed (left out of 3D runs): {len(rate['failed'])} {rate['failed']}")
    for r in rows:
        print(
            f"model={r['model']} train={r['train_mol_s']:.1f} infer={r['infer_mol_s']:.1f} "
            f"peak_mb={r['peak_mb']:.0f} data_share={r['data_share']:.3f}"
        )


if __name__ == "__main__":
    main()
