"""MoleculeDataModule: one task, one persisted split, one feature cache, four loaders."""

from __future__ import annotations

import logging
from pathlib import Path

import lightning as L
import numpy as np
from torch.utils.data import DataLoader

from oodmol.data.features import FeatureSet
from oodmol.data.featurize.base import Featurizer
from oodmol.data.splits.assignment import SETS, SplitAssignment
from oodmol.data.splits.splitters import Splitter
from oodmol.data.store import FeatureStore
from oodmol.data.task import Task, TaskData, load_split, load_task

log = logging.getLogger(__name__)
TEST_SETS = ("id", "ood")  # the sets a run is scored on
# test dataloader order (dataloader_idx 0, 1, 2): the validation set is predicted too, for
# recalibrating uncertainties and for combining ensemble members afterwards
PREDICTED_SETS = (*TEST_SETS, "val")


class MoleculeDataModule(L.LightningDataModule):
    """Train, validation, ID-test and OOD-test loaders of a task.

    `prepare_data` (one process) validates the data set, writes the split file and
    builds the feature cache; `setup` (every process) only reads them. Target statistics
    and feature statistics come from the training set alone.

    With `bootstrap_seed` the training *dataset* is a resample of the training molecules
    with replacement (same size, seeded), for bootstrap ensembles; feature and target
    statistics stay those of the whole training set, so every member reads the same
    inputs, and validation and test sets are unchanged.
    """

    def __init__(
        self,
        task: Task,
        split: Splitter,
        featurizer: Featurizer,
        features: FeatureSet,
        data_dir: str,
        batch_size: int = 64,
        eval_batch_size: int = 512,
        num_workers: int = 0,
        progress: bool = True,
        bootstrap_seed: int | None = None,
    ) -> None:
        super().__init__()
        self.task = task
        self.splitter = split
        self.featurizer = featurizer
        self.features = features
        self.data_dir = Path(data_dir)
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size
        self.num_workers = num_workers
        self.progress = progress
        self.bootstrap_seed = bootstrap_seed
        self.data: TaskData | None = None
        self.split: SplitAssignment | None = None
        self.datasets: dict = {}

    def prepare_data(self) -> None:
        data = load_task(self.task, self.data_dir, self.progress)
        load_split(data, self.splitter, self.data_dir)
        self._store(data)

    def _store(self, data: TaskData) -> FeatureStore:
        return FeatureStore.build_or_open(
            self.featurizer, data.dataset, self.data_dir / "features", progress=self.progress
        )

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        self.data = load_task(self.task, self.data_dir, progress=False)
        self.split = load_split(self.data, self.splitter, self.data_dir)
        store = self._store(self.data)
        feature_facts = self.features.fit(store, self.split.sets["train"])
        for name in SETS:
            ids = self.split.sets[name]
            if name == "train" and self.bootstrap_seed is not None:
                rng = np.random.default_rng(self.bootstrap_seed)
                ids = rng.choice(ids, size=len(ids), replace=True)
            y = self.data.y[self.data.table.rows_of(ids)]
            self.datasets[name] = self.features.dataset(store, ids, y, name)
        facts = {**feature_facts, "imputed_values": dict(self.features.imputed)}
        log.info("features of %s: %s", self.task.name, facts)
        self.feature_facts = facts

    # Facts the model and the evaluation need, all from the training set.
    @property
    def train_targets(self) -> np.ndarray:
        return self.targets("train")

    def targets(self, name: str) -> np.ndarray:
        return self.data.y[self.data.table.rows_of(self.split.sets[name])]

    def mol_ids(self, name: str) -> np.ndarray:
        return self.split.sets[name]

    def smiles(self, name: str) -> np.ndarray:
        return self.data.table.smiles[self.data.table.rows_of(self.split.sets[name])]

    def _loader(self, name: str, shuffle: bool) -> DataLoader:
        return DataLoader(
            self.datasets[name],
            batch_size=self.batch_size if shuffle else self.eval_batch_size,
            shuffle=shuffle,
            num_workers=self.num_workers,
            collate_fn=self.features.collate,
            persistent_workers=self.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> list[DataLoader]:
        return [self._loader(name, shuffle=False) for name in PREDICTED_SETS]
