"""The memory planner's estimate held against the measured peak, per model family, on the
largest molecules of every data set (`oodmol.training.memory`).

    python -m bench.memory_planner [--models et,geoformer] [--published] [--batch-size 8]
        [--data-dir DIR] [--json] [--default-malloc]

A task of the largest molecules (atoms with hydrogens) of the 10k CSD set, Lipophilicity
and QM9, beside drug-like molecules of typical size, is featurised as train.py featurises
it (`--data-dir` keeps the caches between calls). Per model (small widths, or the
published ones with `--published`), built as train.py builds it and with freed memory
kept as train.py keeps it (unless `--default-malloc`), the planner measures its curve
and estimates every training step of two epochs (the run's own sampler, `--batch-size`
molecules); then those steps run one after another and their peak is measured as the
planner measures (the machine's count: `oodmol.training.memory_meter`), so that what the
heap loses to fragmentation over the steps counts. Columns, in MB: the largest estimate,
the peak and their ratio (below 1: the planner would have let through a run that does
not fit), the probing's and the steps' seconds. `--json`: one line per model.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from oodmol.allocator import keep_freed_memory
from oodmol.config import compose_config
from oodmol.training.build import build_datamodule, build_model, training_statistics
from oodmol.training.memory import TrainingBatches, molecule_sizes, step_cost, training_step
from oodmol.training.memory_meter import MB, available_bytes, measured

CPU = torch.device("cpu")
# the largest molecules of each data set, by atoms with hydrogens
LARGEST = {  # as their data files write them
    "csd10k": [
        "O=C1N(CCCOc2c3Cc4cc(cc(Cc5cc(cc(Cc6cc(cc(Cc2cc(c3)N(=O)=O)c6OCCCN2C(=O)c3ccccc3C2=O)"
        "N(=O)=O)c5OCCCN2C(=O)c3ccccc3C2=O)N(=O)=O)c4OCCCN2C(=O)c3ccccc3C2=O)N(=O)=O)C(=O)"
        "c2ccccc12",  # 156 atoms
        "COC(=O)C(C)(C)NC(=O)C(C)(C)NC(=O)C(C)(C)NC(=O)C(C)(C)NC(=O)C(C)(C)NC(=O)C(C)(C)NC(=O)"
        "C(C)(C)NC(=O)C1(CC(C)(C)N([O])C(C)(C)C1)NC(=O)OCC1c2ccccc2c2ccccc12",  # 155
    ],
    "lipophilicity": [
        "CCCCCCCCCC(=O)N[C@@H](Cc1c[nH]c2ccccc12)C(=O)N[C@@H](CC(=O)N)C(=O)N[C@@H](CC(=O)O)"
        "C(=O)N[C@H]3[C@@H](C)OC(=O)[C@H](CC(=O)c4ccccc4N)NC(=O)[C@@H](NC(=O)[C@@H](CO)NC(=O)"
        "CNC(=O)[C@H](CC(=O)O)NC(=O)[C@@H](C)NC(=O)[C@H](CC(=O)O)NC(=O)[C@H](CCCN)NC(=O)CNC3=O)"
        "[C@H](C)CC(=O)O",  # 216 atoms
        "CC[C@H](C)[C@H](N)C1=N[C@@H](CS1)C(=O)N[C@@H](CC(C)C)C(=O)N[C@H](CCC(=O)O)C(=O)N"
        "[C@@H]([C@@H](C)CC)C(=O)N[C@H]2CCCCNC(=O)[C@H](CC(=O)N)NC(=O)[C@@H](CC(=O)O)NC(=O)"
        "[C@H](Cc3cnc[nH]3)NC(=O)[C@@H](Cc4ccccc4)NC(=O)[C@@H](NC(=O)[C@@H](CCCN)NC2=O)[C@@H](C)CC",
        # 203
    ],
    # nine heavy atoms and twenty hydrogens: 29, the most a QM9 molecule has
    "qm9": ["CCCCCCCCC", "CCCCCCC(C)C"],
}
TYPICAL = [  # drug-like molecules of the sizes most of a data set has (20 to 50 atoms)
    "CC(=O)Oc1ccccc1C(=O)O",
    "CC(C)Cc1ccc(C(C)C(=O)O)cc1",
    "Cn1c(=O)c2c(ncn2C)n(C)c1=O",
    "CC(=O)Nc1ccc(O)cc1",
    "COc1ccc2cc(C(C)C(=O)O)ccc2c1",
    "CN1C(=O)CN=C(c2ccccc2)c2cc(Cl)ccc21",
    "CCN(CC)CCNC(=O)c1ccc(N)cc1",
    "O=C(O)Cc1ccccc1Nc1c(Cl)cccc1Cl",
    "CC12CCC3c4ccc(O)cc4CCC3C1CCC2O",
    "CN1CCC(CC1)=C1c2ccccc2C=Cc2ccccc21",
    "Clc1ccc(cc1)C(c1ccccc1)N1CCN(CC1)CCOCC(=O)O",
    "CC(C)NCC(O)COc1cccc2ccccc12",
]
# tiny widths for each family's models (the planner's scaling law is what is checked)
TINY = {  # small widths whose steps still take tens of MB: what the machine's count resolves
    "mlp": ["model.module.backbone.hidden=[65536]"],
    "chemprop": ["model.hidden=1024"],
    "tgnn": ["model.module.backbone.hidden=512"],
    **{
        name: [
            f"model.module.backbone.{o}"
            for o in ("layers=2", "heads=8", "hidden=64", "intermediate=128")
        ]
        for name in ("chemberta", "molformer", "modernbert", "rt_regression")
    },
    **{
        name: [f"model.module.backbone.{o}" for o in options]
        for name, options in {
            "et": ("hidden=32", "layers=2", "heads=2"),
            "painn": ("hidden=32", "layers=2"),
            "schnet": ("hidden_channels=32", "num_filters=32", "num_interactions=2"),
            "dimenetpp": (
                "hidden_channels=16",
                "out_emb_channels=16",
                "int_emb_size=16",
                "num_blocks=2",
            ),
            "visnet": ("hidden_channels=32", "num_layers=2"),
            "mace": ("num_channels=8", "radial_mlp=[16]", "mlp_irreps=8x0e"),
            "gotennet": ("hidden=32", "layers=2", "output_hidden=32"),
            "graphormer3d": ("node_dim=32", "ff_dim=32", "edge_dim=16", "num_heads=2"),
            "geoformer": (
                "embedding_dim=32",
                "ffn_embedding_dim=32",
                "num_layers=2",
                "num_heads=2",
            ),
            "ignn": ("hidden=128",),
            "egnn": ("hidden=128",),
        }.items()
    },
}
FAMILIES = {
    "fixed-length vectors": ["mlp"],
    "2D graphs": ["chemprop", "tgnn"],
    "token sequences": ["chemberta", "molformer", "modernbert", "rt_regression"],
    "3D neighbour graphs": ["et", "painn", "schnet", "dimenetpp", "visnet", "mace", "gotennet"],
    "3D dense pairs": ["geoformer", "graphormer3d"],
    "3D dense blocks": ["ignn", "egnn"],
}


@dataclass(frozen=True)
class Comparison:
    """The planner's largest estimate of the training steps of some epochs and the
    peak of those steps run one after another (bytes), as a run's process holds them."""

    model: str
    estimate: float
    peak: float
    probe_seconds: float
    run_seconds: float

    @property
    def ratio(self) -> float:
        return self.estimate / max(self.peak, 1)

    def row(self, family: str) -> str:
        return (
            f"{family:22s} {self.model:14s} {self.estimate / MB:9.1f} {self.peak / MB:9.1f} "
            f"{self.ratio:9.2f} {self.probe_seconds:9.1f} {self.run_seconds:9.1f}"
        )


def molecules() -> list[str]:
    return [*(s for group in LARGEST.values() for s in group), *TYPICAL]


def write_task(folder: Path) -> list[str]:
    """The largest molecules' task in `folder`: train.py's overrides for it."""
    csv = folder / "largest.csv"
    rows = [f"{smiles},{k % 7 * 0.5}" for k, smiles in enumerate(molecules())]
    csv.write_text("smiles,y\n" + "\n".join(rows) + "\n")
    return [
        "task=csv",
        f"task.path={csv}",
        "task.target_column=y",
        "++task.name=largest",
        "split=random",
        f"paths.data_dir={folder / 'data'}",
        "progress=false",
        "threads=1",
    ]


def compare(
    model: str, task: list[str], batch_size: int, sizes: list[str] | None = None, epochs: int = 2
) -> Comparison:
    """The planner's estimate against the measured peak of `epochs` epochs of training
    steps on every molecule of the task, drawn as a run draws them, for `model=<model>` at
    `sizes` (TINY's by default)."""
    overrides = [f"model={model}", *(TINY[model] if sizes is None else sizes), *task]
    cfg = compose_config("train", overrides)
    torch.set_num_threads(1)
    dm = build_datamodule(cfg)
    dm.prepare_data()
    dm.setup("fit")
    every = np.sort(np.concatenate([dm.set_ids[name] for name in dm.set_ids]))
    targets = dm.data.y[dm.data.table.rows_of(every)]
    dm.datasets["train"] = dm.features.dataset(dm.store, every, targets, "train")
    torch.manual_seed(0)
    net = build_model(cfg, training_statistics(cfg, dm))
    dataset, collate = dm.datasets["train"], dm.features.collate

    def orders(size: int):
        return dm.training_orders(size, epochs)

    started = time.perf_counter()
    cost = step_cost(
        net,
        dataset,
        collate,
        CPU,
        TrainingBatches(dataset, batch_size, orders),
        available_bytes(CPU) / 2,
    )
    probed = time.perf_counter()
    sizes_of = molecule_sizes(dataset)
    estimate = max(
        cost.of_batches(order, batch_size, sizes_of).max() for order in orders(batch_size)
    )
    batches = [
        collate(dataset.__getitems__(order[start : start + batch_size].tolist()))
        for order in orders(batch_size)
        for start in range(0, len(order), batch_size)
    ]
    with measured(CPU) as peak:
        for batch in batches:
            training_step(net, batch)
    done = time.perf_counter()
    return Comparison(model, float(estimate), float(peak()), probed - started, done - probed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(TINY))
    parser.add_argument("--published", action="store_true", help="the models' own widths")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--json", action="store_true", help="one JSON line per model")
    parser.add_argument("--default-malloc", action="store_true", help="glibc's own settings")
    args = parser.parse_args()
    if not args.default_malloc:
        keep_freed_memory()  # as train.py does
    folder = args.data_dir or Path(tempfile.mkdtemp(prefix="memory-planner-"))
    folder.mkdir(parents=True, exist_ok=True)
    task = write_task(folder)
    family_of = {m: family for family, models in FAMILIES.items() for m in models}
    columns = ("estimate", "peak", "ratio", "probe s", "run s")
    if not args.json:
        print(f"{'family':22s} {'model':14s} " + " ".join(f"{c:>9s}" for c in columns))
    for model in args.models.split(","):
        result = compare(model, task, args.batch_size, [] if args.published else None)
        if args.json:
            print(json.dumps({"model": model, "estimate": result.estimate, "peak": result.peak}))
        else:
            print(result.row(family_of[model]), flush=True)


if __name__ == "__main__":
    main()
