"""A tiny CSV task with all three of its caches: the validated table, the split file and
a Morgan fingerprint feature cache."""

from __future__ import annotations

import os
from pathlib import Path

from oodmol.data.featurize.fingerprints import MorganFingerprint
from oodmol.data.splits.splitters import RandomSplitter
from oodmol.data.store import FeatureStore
from oodmol.data.task import csv_task, load_split, load_task

ROWS = [f"{'C' * k},{k * 0.5}" for k in range(1, 11)]  # alkanes
ROWS += [f"{'C' * k}O,{k - 3}" for k in range(1, 11)]  # alcohols


def write_csv(path: Path) -> Path:
    path.write_text("\n".join(["smiles,y", *ROWS]) + "\n")
    return path


def load_all(csv: Path, data_dir: Path) -> tuple[str, str, int]:
    """Load (building where missing) the table, split and feature cache of the task on
    `csv`; returns what identifies them: table version, split hash, cached molecules."""
    data = load_task(csv_task(str(csv), "y"), data_dir, progress=False)
    split = load_split(data, RandomSplitter(ood_size=0.2, seed=0), data_dir)
    store = FeatureStore.build_or_open(
        MorganFingerprint(n_bits=64), data.dataset, data_dir / "features", n_jobs=1, progress=False
    )
    return data.table.version, split.hash, len(store)


def tree(folder: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under `folder` (hidden ones too) with its mode, size and mtime."""
    entries = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(root, name)
            stat = path.lstat()
            entries[str(path.relative_to(folder))] = (stat.st_mode, stat.st_size, stat.st_mtime_ns)
    return entries
