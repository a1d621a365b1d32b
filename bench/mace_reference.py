"""Our MACE against mace-torch 0.3.16 on the same batches of `csd10k_density` training
molecules, with identical weights, in float64 (BOOM's precision): training molecules per
second (forward, per-atom loss, backward, Adam step) and peak memory, each side in its own
process. Runs in the side environment that has mace-torch:

    make bench-mace ARGS="--batch-size 8 --batches 4 --threads 1"

(with OODMOL_SOURCE_DIR set where the data must come from an offline copy).

Ours searches neighbours inside its forward pass (timed); mace's neighbour lists are
built by its data pipeline, here before the clock starts, so the comparison is
conservative for ours. The last line is `reference_ratio=<ours/reference>` of the
training throughputs.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from torch_geometric.utils import scatter

from oodmol.allocator import keep_freed_memory

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the reference builder shared with the tests


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def benchmark_batches(batch_size: int, n_batches: int):
    """The datamodule of `model=mace` on csd10k_density and `n_batches + 1` batches of its
    training molecules in a fixed random order (the first is the warm-up), in float64."""
    from oodmol.config import compose_config
    from oodmol.training.build import build_datamodule, training_statistics

    cfg = compose_config(
        "train", ["model=mace", "task=csd10k_density", "split=ood", "progress=false"]
    )
    dm = build_datamodule(cfg)
    dm.prepare_data()
    dm.setup("fit")
    dataset = dm.datasets["train"]
    order = np.random.default_rng(0).permutation(len(dataset))
    batches = []
    for k in range(n_batches + 1):
        idx = order[k * batch_size : (k + 1) * batch_size].tolist()
        batch = dm.features.collate(dataset.__getitems__(idx))
        batches.append(replace(batch, pos=batch.pos.double(), y=batch.y.double()))
    return cfg, training_statistics(cfg, dm), batches


def measure(side: str, batch_size: int, n_batches: int) -> dict:
    """One side's figures (run in a child process, so that its peak memory is its own)."""
    from mace_reference import reference_inputs, reference_model

    from oodmol.training.build import build_model

    torch.set_default_dtype(torch.float64)
    cfg, statistics, batches = benchmark_batches(batch_size, n_batches)
    baseline = rss_mb()
    torch.manual_seed(0)
    module = build_model(cfg, statistics).double()
    ours = module.backbone
    elements = statistics["backbone.atomic_numbers"]
    if side == "ours":
        model = module
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, amsgrad=True)
        inputs = batches

        def loss_of(batch):
            energies, segment = ours(batch)
            energy = scatter(energies.squeeze(-1), segment, dim=0, dim_size=len(batch))
            atoms = torch.bincount(segment, minlength=len(batch))
            return torch.mean(((energy - batch.y) / atoms) ** 2)

    else:
        model = reference_model(ours, elements, statistics["backbone.avg_num_neighbors"])
        del module, ours
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, amsgrad=True)
        inputs = [
            (reference_inputs(b, elements, cfg.model.module.backbone.r_max), b) for b in batches
        ]

        def loss_of(pair):
            data, batch = pair
            energy = model(data, training=True, compute_force=False)["energy"]
            atoms = torch.bincount(batch.molecule, minlength=len(batch))
            return torch.mean(((energy - batch.y) / atoms) ** 2)

    def step(batch) -> None:
        optimizer.zero_grad(set_to_none=True)
        loss_of(batch).backward()
        optimizer.step()

    model.train()
    step(inputs[0])
    started = time.perf_counter()
    for batch in inputs[1:]:
        step(batch)
    seconds = (time.perf_counter() - started) / n_batches
    return {
        "side": side,
        "params": sum(p.numel() for p in model.parameters()),
        "atoms_per_batch": float(np.mean([len(b.z) for b in batches[1:]])),
        "train_mol_s": batch_size / seconds,
        "step_s": seconds,
        "peak_mb": rss_mb() - baseline,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=8)  # BOOM's, on the 10k set
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # child process: one side
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    keep_freed_memory()  # as train.py does: the step without page-fault churn
    if args.one:
        print(json.dumps(measure(args.one, args.batch_size, args.batches)))
        return
    rows = {}
    for side in ("ours", "reference"):
        command = [sys.executable, __file__, "--one", side, *sys.argv[1:]]
        output = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True).stdout
        rows[side] = json.loads(output.strip().splitlines()[-1])
    header = ("side", "params", "atoms/batch", "train mol/s", "s/step", "peak MB")
    print("{:<10} {:>9} {:>11} {:>12} {:>8} {:>8}".format(*header))
    for side, r in rows.items():
        print(
            f"{side:<10} {r['params']:>9} {r['atoms_per_batch']:>11.1f} "
            f"{r['train_mol_s']:>12.3f} {r['step_s']:>8.2f} {r['peak_mb']:>8.0f}"
        )
    print(f"reference_ratio={rows['ours']['train_mol_s'] / rows['reference']['train_mol_s']:.3f}")


if __name__ == "__main__":
    main()
