"""Train Chemprop v2 (its own Python API) and our `model=chemprop` side by side on the
same training split, with the same architecture, batch size and torch threads.

    python -m bench.chemprop_throughput [--threads 1] [--epochs 3] [--repeats 2]
        [--profile-batches 40] [--default-malloc]

Chemprop 2.3.1 pins rdkit==2026.03.6, so run it where chemprop is installed (`make
bench-chemprop` builds .venv-chemprop with chemprop and oodmol). Prints featurisation
seconds (reported apart: ours is built once into the LMDB cache, Chemprop's
`MoleculeDataset.cache = True`, which `chemprop train` sets, featurises once per
process), seconds per epoch after the first and molecules per second for both (training
only: Lightning's loop without validation or checkpoints), a per-batch profile (batch
building, forward, backward, optimizer step), and as its last line
``speedup=<ours/theirs>``, the ratio of training molecules per second. Both train in this
process, taking turns `--repeats` times, with freed memory kept as train.py keeps it
(`bench.harness.setup`; `--default-malloc`: glibc's default, as this bench ran before).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import lightning as L
import numpy as np
import torch
from hydra.utils import instantiate
from torch_geometric.data import Batch, Data

from bench import harness
from oodmol.config import compose_config
from oodmol.data.batches import GraphBatch
from oodmol.data.featurize.base import inputs_of
from oodmol.training.build import build_datamodule, build_model, training_statistics

if TYPE_CHECKING:
    from chemprop.models import MPNN


class EpochTimer(L.Callback):
    """Wall and CPU seconds (this process, all threads) of every training epoch."""

    def __init__(self) -> None:
        self.seconds: list[tuple[float, float]] = []

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self.started = time.perf_counter(), time.process_time()

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        wall, cpu = self.started
        self.seconds.append((time.perf_counter() - wall, time.process_time() - cpu))


def fit_seconds(module: L.LightningModule, epochs: int, **fit_kwargs) -> list[tuple[float, float]]:
    """(wall, CPU) seconds of each epoch of a bare Lightning fit: no validation,
    checkpoints or logging."""
    timer = EpochTimer()
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=epochs,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[timer],
    )
    trainer.fit(module, **fit_kwargs)
    return timer.seconds


class Ours:
    """`model=chemprop` exactly as train.py builds it (featuriser, cache, datamodule)."""

    def __init__(self, task: str, split: str, epochs: int) -> None:
        cfg = compose_config(
            "train", ["model=chemprop", f"task={task}", f"split={split}", "progress=false"]
        )
        cfg.model.max_epochs = epochs
        self.dm = build_datamodule(cfg)
        started = time.perf_counter()
        self.dm.prepare_data()  # builds the graph cache if it is not there yet
        self.prepare_seconds = time.perf_counter() - started
        started = time.perf_counter()
        self.dm.setup("fit")
        self.load_seconds = time.perf_counter() - started  # train/val/test sets from LMDB
        self.cfg = cfg
        self.train = self.dm.datasets["train"]
        rows = self.dm.data.table.rows_of(self.dm.split.sets["train"])
        self.smiles = self.dm.data.table.smiles[rows].tolist()
        self.inputs = inputs_of(self.dm.data.table, rows)
        self.y = self.dm.train_targets

    def featurise_seconds(self) -> float:
        """One process featurising the training molecules (the cache build, minus LMDB)."""
        featurizer = instantiate(self.cfg.model.featurizer)
        started = time.perf_counter()
        for mol in self.inputs:
            featurizer(mol)
        return time.perf_counter() - started

    def module(self) -> L.LightningModule:
        return build_model(self.cfg, training_statistics(self.cfg, self.dm))

    def fit(self, epochs: int) -> list[tuple[float, float]]:
        self.cfg.model.max_epochs = epochs
        return fit_seconds(self.module(), epochs, datamodule=self.dm)

    def batches(self, order: np.ndarray, size: int) -> Callable[[int], GraphBatch]:
        return lambda k: self.train.__getitems__(order[k * size : (k + 1) * size].tolist())[0]

    def pyg_batches(self, order: np.ndarray, size: int) -> Callable[[int], Batch]:
        """PyTorch Geometric's batching of the same graphs, for comparison only."""
        graphs = []
        for i in range(len(self.train)):
            g = self.train.__getitems__([i])[0]
            graphs.append(Data(x=g.x, edge_index=g.edge_index, edge_attr=g.edge_attr))
        return lambda k: Batch.from_data_list([graphs[i] for i in order[k * size : (k + 1) * size]])

    def step(self, module) -> Callable[[GraphBatch], dict[str, float]]:
        optimizer = torch.optim.Adam(module.parameters())

        def run(batch: GraphBatch) -> dict[str, float]:
            target = (batch.y - module.y_mean) / module.y_std
            return timed_step(
                optimizer,
                lambda: module(batch),
                lambda out: torch.nn.functional.mse_loss(out, target),
            )

        return run


class Theirs:
    """Chemprop v2 through its Python API with `chemprop train`'s defaults (chemprop is
    imported where used, so that `--help` works without it)."""

    def __init__(self, smiles: list[str], y: np.ndarray) -> None:
        from chemprop import data as cp_data
        from chemprop import featurizers as cp_featurizers

        points = [
            cp_data.MoleculeDatapoint.from_smi(s, [v]) for s, v in zip(smiles, y, strict=True)
        ]
        self.featurizer = cp_featurizers.SimpleMoleculeMolGraphFeaturizer()
        self.dataset = cp_data.MoleculeDataset(points, self.featurizer)
        self.scaler = self.dataset.normalize_targets()
        started = time.perf_counter()
        self.dataset.cache = True  # what `chemprop train` does unless --no-cache
        self.featurise_seconds = time.perf_counter() - started

    def module(self) -> MPNN:
        from chemprop import nn as cp_nn
        from chemprop.models import MPNN

        transform = cp_nn.UnscaleTransform.from_standard_scaler(self.scaler)
        return MPNN(
            cp_nn.BondMessagePassing(),
            cp_nn.NormAggregation(),
            cp_nn.RegressionFFN(output_transform=transform),
        )

    def fit(self, epochs: int) -> list[tuple[float, float]]:
        from chemprop import data as cp_data

        loader = cp_data.build_dataloader(self.dataset, batch_size=64, num_workers=0, seed=0)
        return fit_seconds(self.module(), epochs, train_dataloaders=loader)

    def batches(self, order: np.ndarray, size: int) -> Callable[[int], object]:
        from chemprop import data as cp_data

        return lambda k: cp_data.collate_batch(
            [self.dataset[i] for i in order[k * size : (k + 1) * size]]
        )

    def step(self, module: MPNN) -> Callable[[object], dict[str, float]]:
        optimizer = torch.optim.Adam(module.parameters())

        def run(batch) -> dict[str, float]:
            bmg, v_d, x_d, targets, weights, lt_mask, gt_mask = batch
            mask = targets.isfinite()
            return timed_step(
                optimizer,
                lambda: module.predictor.train_step(module.fingerprint(bmg, v_d, x_d)),
                lambda out: module.criterion(out, targets, mask, weights, lt_mask, gt_mask),
            )

        return run


def timed_step(
    optimizer: torch.optim.Optimizer, forward: Callable, loss_of: Callable
) -> dict[str, float]:
    """Seconds of the forward pass (with the loss), backward pass and optimizer step."""
    t0 = time.perf_counter()
    loss = loss_of(forward())
    t1 = time.perf_counter()
    optimizer.zero_grad()
    loss.backward()
    t2 = time.perf_counter()
    optimizer.step()
    t3 = time.perf_counter()
    return {"forward": t1 - t0, "backward": t2 - t1, "optimizer": t3 - t2}


def profile(
    name: str, make_batch: Callable[[int], object], step: Callable, n_batches: int
) -> dict[str, float]:
    """Mean milliseconds per batch of each stage, over `n_batches` after 3 warm-up ones."""
    totals: dict[str, float] = {}
    for k in range(n_batches + 3):
        started = time.perf_counter()
        batch = make_batch(k)
        stages = {"batching": time.perf_counter() - started, **step(batch)}
        if k >= 3:
            for stage, seconds in stages.items():
                totals[stage] = totals.get(stage, 0.0) + seconds
    ms = {stage: 1e3 * s / n_batches for stage, s in totals.items()}
    ms["total"] = sum(ms.values())
    print(f"profile {name:9s} " + "  ".join(f"{k} {v:6.2f} ms" for k, v in ms.items()))
    return ms


def load() -> str:
    return "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], parents=[harness.options(repeats=2)]
    )
    parser.add_argument("--task", default="csd10k_density")
    parser.add_argument("--split", default="ood")
    parser.add_argument("--epochs", type=int, default=3, help="per fit; the first is not timed")
    parser.add_argument("--profile-batches", type=int, default=40)
    args = parser.parse_args()
    harness.setup(args)
    print(f"[bench] threads={args.threads} cpus={os.cpu_count()} {load()}")

    ours = Ours(args.task, args.split, args.epochs)
    n = len(ours.train)
    theirs = Theirs(ours.smiles, ours.y)
    print(
        f"featurise ours {ours.featurise_seconds():6.2f} s (train set, 1 process; cached in "
        f"LMDB, reloading every set takes {ours.load_seconds:.2f} s)   chemprop "
        f"{theirs.featurise_seconds:6.2f} s (dataset.cache = True, every process)"
    )

    if args.profile_batches:
        size = 64
        order = np.random.default_rng(0).permutation(n)
        batches = min(args.profile_batches, n // size - 3)
        torch.manual_seed(0)
        profile("ours", ours.batches(order, size), ours.step(ours.module()), batches)
        profile("chemprop", theirs.batches(order, size), theirs.step(theirs.module()), batches)
        pyg = ours.pyg_batches(order, size)
        started = time.perf_counter()
        for k in range(batches):
            pyg(k)
        ms = 1e3 * (time.perf_counter() - started) / batches
        print(f"batching  PyG Batch.from_data_list {ms:.2f} ms per batch of the same graphs")

    # Alternate the two, so a change in the machine's load hits both alike.
    timed: dict[str, list[tuple[float, float]]] = {"ours": [], "chemprop": []}
    for name, model in harness.turns((("ours", ours), ("chemprop", theirs)), args.repeats):
        torch.manual_seed(0)
        seconds = model.fit(args.epochs)
        timed[name] += seconds[1:]
        print(
            f"epochs    {name:9s} "
            + ", ".join(f"{w:.2f} s (cpu {c:.2f})" for w, c in seconds)
            + f"   {load()}"
        )
    rates, cpu_rates = {}, {}
    for name, seconds in timed.items():
        wall, cpu = np.median(np.array(seconds), axis=0)
        rates[name], cpu_rates[name] = n / wall, n / cpu
        print(
            f"train     {name:9s} {n} molecules: epoch {wall:6.2f} s (cpu {cpu:.2f} s), "
            f"{rates[name]:7.1f} mol/s (per cpu second {cpu_rates[name]:.1f})"
        )
    print(f"cpu_speedup={cpu_rates['ours'] / cpu_rates['chemprop']:.2f}")
    print(f"speedup={rates['ours'] / rates['chemprop']:.2f}")


if __name__ == "__main__":
    main()
