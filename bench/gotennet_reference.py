"""Train our `model=gotennet` and the authors' `gotennet` package (1.1.2) side by side on
the same batches of `csd10k_density` training molecules, with the same weights, sizes
(upstream's QM9 model, as configs/model/gotennet.yaml), optimiser and torch threads.

    python bench/gotennet_reference.py [--threads 1] [--batch-size 32] [--batches 6]
        [--repeats 2]

gotennet needs torch-cluster and torch-scatter, so run it where `make gotennet-env` put
it (`make bench-gotennet`). Each model is timed in its own process (so its peak memory
is its own), the two alternating `--repeats` times so that a change in the machine's
load hits both alike: one warm-up batch, then `--batches` training steps (forward, MSE
loss, backward, AdamW step), in training mode (attention dropout on) and each with its
own neighbour search: ours, and upstream's radius_graph (here the pure-torch stand-in
for torch-cluster), whose time is also printed apart. Peak MB is the process's peak
resident memory minus its resident memory before the model was built. The last line is
``reference_ratio=<ours/reference> ceiling_ratio=<...>``: the ratio of training molecules
per second, and the largest reference_ratio our FLOPs allow (the reference's step time
over our step's FLOPs at the measured matmul peak of its typical shape,
bench/roofline.py's `matmul_floor_ms`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from oodmol.allocator import keep_freed_memory

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))


def benchmark_batches(batch_size: int, n_batches: int) -> tuple[list, object, object]:
    """The same `n_batches + 1` batches of training molecules for both models (those of
    bench/models_throughput.py), the composed config and the datamodule."""
    from models_throughput import benchmark_setup

    cfg, dm, batches_idx = benchmark_setup("gotennet", batch_size, n_batches)
    dataset = dm.datasets["train"]
    batches = [dm.features.collate(dataset.__getitems__(idx)) for idx in batches_idx]
    return batches, cfg, dm


def reference_model(ours, extensive: bool):
    """Upstream's GotenNetWrapper and Atomwise head with our model's sizes and weights."""
    from gotennet import GotenNetWrapper
    from gotennet.models.components.layers import CosineCutoff
    from gotennet.models.components.outputs import Atomwise

    backbone = ours.backbone
    gata = backbone.gata_list[0]
    representation = GotenNetWrapper(
        max_num_neighbors=backbone.max_neighbors,
        n_atom_basis=backbone.hidden,
        n_interactions=len(backbone.gata_list),
        radial_basis="expnorm",
        n_rbf=backbone.radial_basis.means.numel(),
        cutoff_fn=CosineCutoff(backbone.cutoff),
        activation="swish",
        num_heads=gata.heads,
        attn_dropout=gata.dropout,
        edge_updates=True,
        lmax=gata.lmax,
        scale_edge=False,
        sep_htr=True,
        sep_dir=True,
        sep_tensor=True,
    )
    state = {k: v for k, v in backbone.state_dict().items() if not k.startswith("output.")}
    missing, unexpected = representation.load_state_dict(state, strict=False)
    assert not unexpected and all(".layers." in k for k in missing), (missing, unexpected)
    head = Atomwise(
        n_in=backbone.hidden,
        n_hidden=backbone.output.out_dim,
        activation=torch.nn.functional.silu,
        aggregation_mode="sum" if extensive else "mean",
    )
    first, last = head.out_net[1].out_net
    first.load_state_dict(backbone.output.mlp[0].state_dict())
    last.load_state_dict(ours.head.net[0].state_dict())
    return representation, head


def measure(which: str, batch_size: int, n_batches: int) -> dict:
    """Training throughput and peak memory of one model (run in a child process)."""
    from models_throughput import rss_mb
    from roofline import matmul_floor_ms

    import oodmol.models.neighbors as neighbors
    from oodmol.training.build import build_model, training_statistics

    neighbors.HAS_TORCH_CLUSTER = False  # ours searches as in the project's environment
    batches, cfg, dm = benchmark_batches(batch_size, n_batches)
    baseline = rss_mb()
    torch.manual_seed(0)
    ours = build_model(cfg, training_statistics(cfg, dm))
    ours.fit_target_scaling(dm.train_targets)
    targets = [(b.y - ours.y_mean) / ours.y_std for b in batches]
    if which == "ours":
        model, forward = ours, ours
        search = lambda b: ours.backbone.distance(b.pos, b.molecule)  # noqa: E731
    else:
        representation, head = reference_model(ours, cfg.task.extensive)
        del ours
        model = torch.nn.ModuleList([representation, head])

        from torch_geometric.data import Data

        def forward(batch):
            inputs = Data(z=batch.z, pos=batch.pos, batch=batch.molecule)
            inputs.representation, _ = representation(inputs)
            return head(inputs)["y"].squeeze(-1)

        search = lambda b: representation.distance(b.pos, b.molecule)  # noqa: E731
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, eps=1e-7, weight_decay=0.0)
    model.train()

    def step(k: int) -> None:
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(forward(batches[k]), targets[k]).backward()
        optimizer.step()

    step(0)  # warm-up: allocations, lazy initialisation
    started = time.perf_counter()
    for k in range(1, n_batches + 1):
        step(k)
    seconds = (time.perf_counter() - started) / n_batches
    started = time.perf_counter()
    for batch in batches[1:]:
        search(batch)
    search_seconds = (time.perf_counter() - started) / n_batches
    steps = lambda: [step(k) for k in range(1, n_batches + 1)]  # noqa: E731
    floor_ms = matmul_floor_ms(steps, n_batches) if which == "ours" else None
    return {
        "model": which,
        "floor_ms": floor_ms,
        "train_mol_s": batch_size / seconds,
        "step_ms": 1e3 * seconds,
        "search_ms": 1e3 * search_seconds,
        "peak_mb": rss_mb() - baseline,
        "atoms_per_batch": float(np.mean([len(b.z) for b in batches[1:]])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--one", choices=["ours", "reference"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    keep_freed_memory()  # as train.py does: the step without page-fault churn
    if args.one:
        print(json.dumps(measure(args.one, args.batch_size, args.batches)))
        return
    from models_throughput import alternating_runs
    from roofline import ceiling_ratio

    options = ["--batch-size", str(args.batch_size), "--batches", str(args.batches)]
    cases = [("ours",), ("reference",)]
    runs = {
        case[0]: results
        for case, results in alternating_runs(
            __file__, cases, args.repeats, args.threads, options
        ).items()
    }

    print(
        f"\ncsd10k_density training molecules, batch {args.batch_size} "
        f"(~{runs['ours'][0]['atoms_per_batch']:.0f} atoms), {args.batches} steps after a "
        f"warm-up, median of {args.repeats} runs, {args.threads} torch thread(s), "
        f"torch {torch.__version__}"
    )
    print("| model | train mol/s | step ms | neighbour search ms | peak MB |")
    print("|---|---|---|---|---|")
    rates = {}
    for which, results in runs.items():
        rates[which] = float(np.median([r["train_mol_s"] for r in results]))
        step = np.median([r["step_ms"] for r in results])
        search = np.median([r["search_ms"] for r in results])
        peak = max(r["peak_mb"] for r in results)
        print(f"| {which} | {rates[which]:.2f} | {step:.0f} | {search:.1f} | {peak:.0f} |")
    ceiling = ceiling_ratio(runs["reference"], runs["ours"])
    print(f"reference_ratio={rates['ours'] / rates['reference']:.2f} ceiling_ratio={ceiling:.2f}")


if __name__ == "__main__":
    main()
