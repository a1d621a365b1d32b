"""The molecules every bench measures: the same training molecules of a task, in the same
batches, for every model and every side (those every featuriser can represent), and the
models that train in batches. Imports nothing of bench/."""

from __future__ import annotations

import numpy as np

from oodmol.config import config_dir

EXCLUDED = {"rf"}  # not trained in batches


def neural_models() -> list[str]:
    return sorted(p.stem for p in (config_dir() / "model").glob("*.yaml") if p.stem not in EXCLUDED)


def graph3d_featurizer():
    """The 3D featuriser exactly as the 3D model configs include it."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    return instantiate(OmegaConf.load(config_dir() / "featurizer" / "graph3d.yaml"))


def benchmark_molecules(dm, n: int, seed: int = 0) -> np.ndarray:
    """`n` training molecules in a fixed random order, taken only from those every
    featuriser can represent (3D features leave out molecules without a conformer)."""
    from oodmol.data.store import FeatureStore

    store = FeatureStore.build_or_open(
        graph3d_featurizer(), dm.data.dataset, dm.data_dir / "features", progress=False
    )
    train = dm.split.sets["train"]
    usable = train[~np.isin(train, np.fromiter(store.failed, dtype=np.int64))]
    return np.random.default_rng(seed).permutation(usable)[:n]


def benchmark_setup(name: str, batch_size: int, n_batches: int, task: str = "csd10k_density"):
    """`model=<name>`'s composed config and datamodule on `task`, and the training-set
    positions of `n_batches + 1` batches of `benchmark_molecules` (the first is the
    warm-up): the same molecules for every model and every bench."""
    from oodmol.config import compose_config
    from oodmol.training.build import build_datamodule

    cfg = compose_config("train", [f"model={name}", f"task={task}", "split=ood", "progress=false"])
    dm = build_datamodule(cfg)
    dm.prepare_data()
    dm.setup("fit")
    mol_ids = benchmark_molecules(dm, batch_size * (n_batches + 1))
    position = {int(m): i for i, m in enumerate(dm.set_ids["train"])}
    batches_idx = [
        [position[int(m)] for m in mol_ids[k * batch_size : (k + 1) * batch_size]]
        for k in range(n_batches + 1)
    ]
    return cfg, dm, batches_idx


def benchmark_batches(name: str, batch_size: int, n_batches: int, task: str = "csd10k_density"):
    """`benchmark_setup`'s config and datamodule, and its batches collated."""
    cfg, dm, batches_idx = benchmark_setup(name, batch_size, n_batches, task)
    dataset = dm.datasets["train"]
    return cfg, dm, [dm.features.collate(dataset.__getitems__(idx)) for idx in batches_idx]
