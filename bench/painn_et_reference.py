"""Train our `model=painn` and `model=et` and their reference implementations, schnetpack
2.1.1's `representation.PaiNN` and torchmd-net 3.1.0's `TorchMD_ET`, side by side on the
same batches of `csd10k_density` training molecules, with the same weights and sizes (the
published models of configs/model/), optimiser and torch threads.

    python bench/painn_et_reference.py [--models painn,et] [--threads 1] [--batch-size 32]
        [--batches 3] [--repeats 2] [--compile]

Both packages need their own environment (`make painn-et-env`; `make bench-painn-et`).
Only the representation differs between the two sides: the reference is given our
weights (`schnetpack_state_dict`, `torchmdnet_state_dict`) and our neighbour list (each
side searches it, with our search: schnetpack leaves the search to its data pipeline, and
torchmd-net's is NVIDIA Warp's), and both go on through our output MLP, readout, head,
loss and optimiser. Each model is timed in its own process (so its peak memory is its
own), ours and the reference alternating `--repeats` times so that a change in the
machine's load hits both alike: one warm-up batch, then `--batches` training steps
(forward, loss, backward, optimiser step) and `--batches` forward passes without
gradients. Peak MB is the process's peak resident memory minus its resident memory before
the model was built. The last line per model is
``model=<name> reference_ratio=<ours/reference> ceiling_ratio=<...>``: the ratio of
training molecules per second, and the largest reference_ratio our FLOPs allow (the
reference's step time over our step's FLOPs at the measured matmul peak of its typical
shape, bench/roofline.py's `matmul_floor_ms`). `--compile` adds a third side, ours with
`compile_backbone` (torch.compile; its compilation falls in the warm-up batches), and
``compiled_ratio=<ours compiled/reference>``; the reference runs as published, eager.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
import time
import types
from pathlib import Path

import numpy as np
import torch
from torch import nn

from oodmol.allocator import keep_freed_memory

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))


def schnetpack() -> types.SimpleNamespace:
    """schnetpack's `nn`, `properties` and `representation`, imported without running the
    package's __init__: that imports its data loaders, which import `T_co` from
    torch.utils.data.dataloader, gone in torch 2.13; the representation never uses them."""
    if "schnetpack" not in sys.modules:
        spec = importlib.util.find_spec("schnetpack")
        package = types.ModuleType("schnetpack")
        package.__path__ = list(spec.submodule_search_locations)
        package.__spec__ = spec
        sys.modules["schnetpack"] = package
    nn_module = importlib.import_module("schnetpack.nn")
    properties = importlib.import_module("schnetpack.properties")
    representation = importlib.import_module("schnetpack.representation")
    return types.SimpleNamespace(nn=nn_module, properties=properties, representation=representation)


def schnetpack_painn(backbone) -> nn.Module:
    """schnetpack's PaiNN with our backbone's sizes and weights."""
    from oodmol.models.backbones.painn import schnetpack_state_dict

    spk = schnetpack()
    reference = spk.representation.PaiNN(
        n_atom_basis=backbone.hidden,
        n_interactions=len(backbone.messages),
        radial_basis=spk.nn.BesselRBF(
            n_rbf=backbone.rbf.frequencies.numel(), cutoff=backbone.cutoff
        ),
        cutoff_fn=spk.nn.CosineCutoff(backbone.cutoff),
    ).to(backbone.embedding.weight.dtype)
    missing, unexpected = reference.load_state_dict(schnetpack_state_dict(backbone), strict=False)
    assert not unexpected and set(missing) <= {"radial_basis.freqs", "cutoff_fn.cutoff"}
    return reference


def schnetpack_embed(reference: nn.Module, backbone, batch) -> tuple[torch.Tensor, torch.Tensor]:
    """schnetpack's scalar [N, F] and vector [N, 3, F] features on our neighbour list."""
    properties = schnetpack().properties
    j, i = backbone.distance(batch.pos, batch.molecule).index
    out = reference(
        {
            properties.Z: batch.z,
            properties.Rij: batch.pos[j] - batch.pos[i],
            properties.idx_i: i,
            properties.idx_j: j,
        }
    )
    return out["scalar_representation"], out["vector_representation"]


class OurSearch(nn.Module):
    """Our neighbour search (self-loops included) in torchmd-net's `OptimizedDistance`
    interface: edge index, lengths and vectors r_j − r_i."""

    def __init__(self, backbone) -> None:
        super().__init__()
        self.search = backbone.distance

    def forward(self, pos, batch, box=None):
        edges = self.search(pos, batch)
        return edges.index, edges.length, edges.vector


def torchmdnet_et(backbone) -> nn.Module:
    """torchmd-net's ET with our backbone's sizes, weights and neighbour search."""
    from torchmdnet.models.torchmd_et import TorchMD_ET

    from oodmol.models.backbones.et import torchmdnet_state_dict

    reference = TorchMD_ET(
        hidden_channels=backbone.hidden,
        num_layers=len(backbone.layers),
        num_rbf=backbone.rbf.means.numel(),
        rbf_type="expnorm",
        trainable_rbf=isinstance(backbone.rbf.means, nn.Parameter),
        neighbor_embedding=backbone.neighbor_embedding is not None,
        num_heads=backbone.layers[0].heads,
        cutoff_upper=backbone.cutoff,
        max_num_neighbors=backbone.max_neighbors,
        dtype=backbone.embedding.weight.dtype,
    ).to(backbone.embedding.weight.dtype)  # its radial basis ignores `dtype`
    reference.distance = OurSearch(backbone)
    reference.load_state_dict(torchmdnet_state_dict(backbone))
    return reference


def torchmdnet_embed(reference: nn.Module, backbone, batch) -> tuple[torch.Tensor, torch.Tensor]:
    x, vec, *_ = reference(batch.z, batch.pos, batch.molecule)
    return x, vec


REFERENCES = {
    "painn": (schnetpack_painn, schnetpack_embed),
    "et": (torchmdnet_et, torchmdnet_embed),
}


def measure(name: str, which: str, batch_size: int, n_batches: int) -> dict:
    """Training and inference throughput and peak memory of one side (a child process)."""
    from models_throughput import benchmark_setup, rss_mb, training_step
    from roofline import matmul_floor_ms

    import oodmol.models.neighbors as neighbors
    from oodmol.training.build import build_model, training_statistics

    neighbors.HAS_TORCH_CLUSTER = False  # the search of the project's environment
    cfg, dm, batches_idx = benchmark_setup(name, batch_size, n_batches)
    dataset = dm.datasets["train"]
    batches = [dm.features.collate(dataset.__getitems__(idx)) for idx in batches_idx]
    baseline = rss_mb()
    torch.manual_seed(0)
    model = build_model(cfg, training_statistics(cfg, dm))
    model.fit_target_scaling(dm.train_targets)
    backbone = model.backbone
    if which == "reference":
        build, embed = REFERENCES[name]
        reference = build(backbone)
        for child in list(backbone.named_children()):
            if child[0] not in ("output", "distance"):
                delattr(backbone, child[0])  # only the reference's weights are trained
        backbone.reference = reference
        backbone.embed = lambda batch: embed(reference, backbone, batch)
    model.compile_backbone = which == "compiled"
    optimizer = model.optimizer_factory(model.parameters())
    step = training_step(model, optimizer)

    def seconds_per_batch(run) -> float:
        run(batches[0])  # warm-up: allocations, lazy initialisation
        started = time.perf_counter()
        for batch in batches[1:]:
            run(batch)
        return (time.perf_counter() - started) / n_batches

    model.train()
    train_seconds = seconds_per_batch(step)
    model.eval()
    with torch.no_grad():
        infer_seconds = seconds_per_batch(model)
    model.train()
    steps = lambda: [step(batch) for batch in batches[1:]]  # noqa: E731
    floor_ms = matmul_floor_ms(steps, n_batches) if which == "ours" else None
    return {
        "model": name,
        "side": which,
        "floor_ms": floor_ms,
        "train_mol_s": batch_size / train_seconds,
        "infer_mol_s": batch_size / infer_seconds,
        "step_ms": 1e3 * train_seconds,
        "peak_mb": rss_mb() - baseline,
        "atoms_per_batch": float(np.mean([len(b.z) for b in batches[1:]])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="painn,et")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--compile", action="store_true", help="also ours compiled")
    parser.add_argument("--one", nargs=2, metavar=("MODEL", "SIDE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    keep_freed_memory()  # as train.py does: the step without page-fault churn
    if args.one:
        print(json.dumps(measure(*args.one, args.batch_size, args.batches)))
        return
    from models_throughput import alternating_runs
    from roofline import ceiling_ratio

    models = args.models.split(",")
    sides = ("ours", "compiled", "reference") if args.compile else ("ours", "reference")
    cases = [(name, side) for name in models for side in sides]
    options = ["--batch-size", str(args.batch_size), "--batches", str(args.batches)]
    runs = alternating_runs(__file__, cases, args.repeats, args.threads, options)

    first = runs[(models[0], "ours")][0]
    print(
        f"\ncsd10k_density training molecules, batch {args.batch_size} "
        f"(~{first['atoms_per_batch']:.0f} atoms), {args.batches} batches after a warm-up, "
        f"median of {args.repeats} runs, {args.threads} torch thread(s), "
        f"torch {torch.__version__}, load {os.getloadavg()[0]:.2f}"
    )
    print("| model | side | train mol/s | infer mol/s | step ms | peak MB |")
    print("|---|---|---|---|---|---|")
    rates = {}
    for (name, side), results in runs.items():
        rates[name, side] = float(np.median([r["train_mol_s"] for r in results]))
        infer = np.median([r["infer_mol_s"] for r in results])
        step = np.median([r["step_ms"] for r in results])
        peak = max(r["peak_mb"] for r in results)
        print(
            f"| {name} | {side} | {rates[name, side]:.2f} | {infer:.2f} | {step:.0f} | {peak:.0f} |"
        )
    for name in models:
        ceiling = ceiling_ratio(runs[name, "reference"], runs[name, "ours"])
        compiled = (
            f" compiled_ratio={rates[name, 'compiled'] / rates[name, 'reference']:.2f}"
            if args.compile
            else ""
        )
        print(
            f"model={name} reference_ratio={rates[name, 'ours'] / rates[name, 'reference']:.2f} "
            f"ceiling_ratio={ceiling:.2f}{compiled}"
        )


if __name__ == "__main__":
    main()
