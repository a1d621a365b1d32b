"""Our SchNet, DimeNet++ and ViSNet against PyTorch Geometric's own models with the same
weights, sizes (configs/model/<name>.yaml), batches of `csd10k_density` training
molecules, optimiser and torch threads.

    python bench/pyg_reference.py [--models schnet,dimenetpp,visnet] [--threads 1]
        [--batch-size 32] [--batches 4] [--repeats 2]

Each model is timed in its own process, ours and PyG's alternating `--repeats` times so
that a change in the machine's load hits both alike: one warm-up batch, then `--batches`
training steps (forward, MSE on standardised targets, backward, the config's optimiser
step) in training mode, then the same batches' inference (no gradients, eval mode).

The reference is PyG's forward on PyG's modules holding our weights. PyG's neighbour
search needs torch-cluster (and DimeNet++'s triplets torch-sparse), absent here, so
both sides search with `oodmol.models.neighbors.radius_graph` (the tests give PyG the
same); that search is timed apart and printed for both. Our last Linear(s) (the shared
head) become PyG's output Linear(s), and PyG's readout sums or averages as the task does
(DimeNet++'s always sums). DimeNet++'s reference is our module itself run through PyG's
`DimeNetPlusPlus.forward` with its output Linears put back: our class is PyG's, so this
spares a second constructor, which derives the spherical basis with sympy (about 40 s
at the configured 7 × 6 functions, in every DimeNet++ process of this bench).

Rates (molecules per second) and step times are per CPU second of the process
(`time.process_time`): on a shared machine the wall clock also counts other processes'
turns on the cores, which CPU time does not; with one thread it is the model's own work.
The wall-clock training rate is printed beside it. Peak MB is the process's peak
resident memory minus its resident memory before the model was built. The last lines
are ``model=<name> reference_ratio=<ours/PyG> wall_ratio=<...> ceiling_ratio=<...>``: the
ratios of training molecules per CPU second and per wall-clock second, and the largest
reference_ratio our FLOPs allow (PyG's step time over our step's FLOPs at the measured
matmul peak of its typical shape, bench/roofline.py's `matmul_floor_ms`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from oodmol.allocator import keep_freed_memory

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
MODELS = ("schnet", "dimenetpp", "visnet")


def pyg_schnet(ours, mean: bool) -> tuple[torch.nn.Module, Callable]:
    from torch_geometric.nn.models import schnet

    backbone = ours.backbone
    model = schnet.SchNet(
        backbone.hidden_channels,
        backbone.num_filters,
        backbone.num_interactions,
        backbone.num_gaussians,
        backbone.cutoff,
        interaction_graph=backbone.interaction_graph,
        readout="mean" if mean else "add",
    )
    head = ours.head.net[0]
    model.load_state_dict(
        {**backbone.state_dict(), "lin2.weight": head.weight, "lin2.bias": head.bias}
    )
    return model, lambda b: model(b.z, b.pos, b.molecule).squeeze(-1)


def pyg_dimenetpp(ours, mean: bool) -> tuple[torch.nn.Module, Callable]:
    from torch_geometric.nn.models import dimenet

    from oodmol.models.backbones.dimenetpp import triplets
    from oodmol.models.neighbors import radius_graph

    def pyg_triplets(edge_index, num_nodes):
        idx_kj, idx_ji, idx_k, idx_i = triplets(edge_index, num_nodes)
        row, col = edge_index
        return col, row, idx_i, row[idx_ji], idx_k, idx_kj, idx_ji

    dimenet.radius_graph = lambda pos, r, batch, max_num_neighbors: radius_graph(
        pos, batch, r, max_num_neighbors
    )
    dimenet.triplets = pyg_triplets
    model = ours.backbone
    weight = ours.head.net[0].weight.detach()
    width = weight.shape[1] // len(model.output_blocks)
    for block, part in zip(model.output_blocks, weight.split(width, dim=1), strict=True):
        block.lin = torch.nn.Linear(width, 1, bias=False)
        block.lin.weight.data.copy_(part)
    pyg_forward = dimenet.DimeNetPlusPlus.forward
    return model, lambda b: pyg_forward(model, b.z, b.pos, b.molecule).squeeze(-1)


def pyg_visnet(ours, mean: bool) -> tuple[torch.nn.Module, Callable]:
    from torch_geometric.nn.models import visnet

    from oodmol.models.backbones.visnet import Distance

    backbone = ours.backbone
    block = backbone.representation
    model = visnet.ViSNet(
        lmax=block.lmax,
        vecnorm_type=block.vecnorm_type,
        trainable_vecnorm=block.trainable_vecnorm,
        num_heads=block.num_heads,
        num_layers=block.num_layers,
        hidden_channels=block.hidden_channels,
        num_rbf=block.num_rbf,
        trainable_rbf=block.trainable_rbf,
        max_z=block.max_z,
        cutoff=block.cutoff,
        max_num_neighbors=block.max_num_neighbors,
        reduce_op="mean" if mean else "sum",
    )
    model.representation_model.distance = Distance(block.cutoff, block.max_num_neighbors)
    state = model.state_dict()
    state.update({f"representation_model.{k}": v for k, v in block.state_dict().items()})
    state.update(
        {f"output_model.output_network.0.{k}": v for k, v in backbone.gated.state_dict().items()}
    )
    last = "output_model.output_network.1"
    head = ours.head.net[0]
    state[f"{last}.vec1_proj.weight"] = backbone.vec_proj.weight
    state[f"{last}.update_net.0.weight"] = backbone.lin.weight
    state[f"{last}.update_net.0.bias"] = backbone.lin.bias
    state[f"{last}.update_net.2.weight"][0] = head.weight[0]
    state[f"{last}.update_net.2.bias"][0] = head.bias[0]
    model.load_state_dict(state)
    return model, lambda b: model(b.z, b.pos, b.molecule)[0].squeeze(-1)


REFERENCES = {"schnet": pyg_schnet, "dimenetpp": pyg_dimenetpp, "visnet": pyg_visnet}


def measure(name: str, which: str, batch_size: int, n_batches: int) -> dict:
    """Training and inference throughput and peak memory of one model (in a child)."""
    from models_throughput import benchmark_setup, rss_mb
    from roofline import matmul_floor_ms

    import oodmol.models.neighbors as neighbors
    from oodmol.training.build import build_model, training_statistics

    neighbors.HAS_TORCH_CLUSTER = False  # both search as in the project's environment
    cfg, dm, batches_idx = benchmark_setup(name, batch_size, n_batches)
    dataset = dm.datasets["train"]
    batches = [dm.features.collate(dataset.__getitems__(idx)) for idx in batches_idx]
    baseline = rss_mb()
    torch.manual_seed(0)
    built = time.perf_counter()
    ours = build_model(cfg, training_statistics(cfg, dm))
    build_seconds = time.perf_counter() - built
    ours.fit_target_scaling(dm.train_targets)
    targets = [(b.y - ours.y_mean) / ours.y_std for b in batches]
    optimizer_factory = ours.optimizer_factory
    if which == "ours":
        model, forward = ours, ours
    else:
        model, forward = REFERENCES[name](ours, mean=not cfg.task.extensive)
        del ours
    optimizer = optimizer_factory(model.parameters())

    def train(k: int) -> None:
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(forward(batches[k]), targets[k]).backward()
        optimizer.step()

    def seconds_per_batch(step: Callable[[int], object]) -> tuple[float, float]:
        """Wall-clock and CPU seconds of this process per batch, after a warm-up."""
        step(0)  # warm-up: allocations, lazy initialisation
        wall, cpu = time.perf_counter(), time.process_time()
        for k in range(1, n_batches + 1):
            step(k)
        return (
            (time.perf_counter() - wall) / n_batches,
            (time.process_time() - cpu) / n_batches,
        )

    model.train()
    train_seconds, train_cpu = seconds_per_batch(train)
    model.eval()
    with torch.no_grad():
        infer_seconds, infer_cpu = seconds_per_batch(lambda k: forward(batches[k]))
    cutoff = float(cfg.model.module.backbone.cutoff)
    max_neighbors = int(cfg.model.module.backbone.max_neighbors)
    started = time.perf_counter()
    for batch in batches[1:]:
        neighbors.radius_graph(batch.pos, batch.molecule, cutoff, max_neighbors)
    search_seconds = (time.perf_counter() - started) / n_batches
    model.train()
    steps = lambda: [train(k) for k in range(1, n_batches + 1)]  # noqa: E731
    floor_ms = matmul_floor_ms(steps, n_batches) if which == "ours" else None
    return {
        "model": name,
        "which": which,
        "floor_ms": floor_ms,
        "train_mol_s": batch_size / train_cpu,
        "infer_mol_s": batch_size / infer_cpu,
        "step_ms": 1e3 * train_cpu,
        "wall_train_mol_s": batch_size / train_seconds,
        "wall_infer_mol_s": batch_size / infer_seconds,
        "search_ms": 1e3 * search_seconds,
        "build_s": build_seconds,
        "peak_mb": rss_mb() - baseline,
        "atoms_per_batch": float(np.mean([len(b.z) for b in batches[1:]])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--one", nargs=2, metavar=("MODEL", "WHICH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    keep_freed_memory()  # as train.py does: the step without page-fault churn
    if args.one:
        print(json.dumps(measure(*args.one, args.batch_size, args.batches)))
        return
    from models_throughput import alternating_runs
    from roofline import ceiling_ratio

    names = args.models.split(",")
    if unknown := set(names) - set(MODELS):
        sys.exit(f"unknown models {sorted(unknown)}; choose from {MODELS}")
    options = ["--batch-size", str(args.batch_size), "--batches", str(args.batches)]
    runs: dict[tuple[str, ...], list[dict]] = {}
    for name in names:  # every repeat of one model before the next
        cases = [(name, "ours"), (name, "pyg")]
        runs |= alternating_runs(__file__, cases, args.repeats, args.threads, options)

    print(
        f"\ncsd10k_density training molecules, batch {args.batch_size}, {args.batches} steps "
        f"after a warm-up, median of {args.repeats} runs, {args.threads} torch thread(s), "
        f"torch {torch.__version__}"
    )
    print("| model | impl | atoms/batch | train mol/s | infer mol/s | step ms (CPU) "
          "| wall train mol/s | search ms | build s | peak MB |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    rates, wall = {}, {}
    for (name, which), results in runs.items():
        rates[name, which] = float(np.median([r["train_mol_s"] for r in results]))
        wall[name, which] = float(np.median([r["wall_train_mol_s"] for r in results]))
        row = [
            name,
            which,
            f"{results[0]['atoms_per_batch']:.0f}",
            f"{rates[name, which]:.2f}",
            f"{np.median([r['infer_mol_s'] for r in results]):.2f}",
            f"{np.median([r['step_ms'] for r in results]):.0f}",
            f"{np.median([r['wall_train_mol_s'] for r in results]):.2f}",
            f"{np.median([r['search_ms'] for r in results]):.1f}",
            f"{np.median([r['build_s'] for r in results]):.1f}",
            f"{max(r['peak_mb'] for r in results):.0f}",
        ]
        print("| " + " | ".join(row) + " |")
    for name in names:
        ceiling = ceiling_ratio(runs[name, "pyg"], runs[name, "ours"])
        print(
            f"model={name} reference_ratio={rates[name, 'ours'] / rates[name, 'pyg']:.2f} "
            f"wall_ratio={wall[name, 'ours'] / wall[name, 'pyg']:.2f} ceiling_ratio={ceiling:.2f}"
        )


if __name__ == "__main__":
    main()
