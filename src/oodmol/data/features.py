"""From cached features to batches: what a model reads, with train-only statistics."""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np
import torch
from torch.utils.data import Dataset

from oodmol.data.featurize.impute import TrainImputer
from oodmol.data.store import FeatureStore

FLOAT32_MAX = float(np.finfo(np.float32).max)


class FeatureSet(ABC):
    """How one kind of cached feature becomes torch batches.

    `fit` sees the training molecules only (imputation values, scaling), so nothing
    about validation or test molecules leaks into what a model reads.
    """

    @abstractmethod
    def fit(self, store: FeatureStore, train_ids: np.ndarray) -> dict:
        """Learn training statistics; returns facts for the data report."""

    @abstractmethod
    def dataset(
        self, store: FeatureStore, mol_ids: np.ndarray, y: np.ndarray, name: str
    ) -> Dataset:
        """A dataset of the molecules of set `name`; items carry `index` (position)."""

    def collate(self, items: list[dict]) -> dict:
        return torch.utils.data.default_collate(items)

    @abstractmethod
    def dims(self) -> dict[str, int]:
        """Input widths a backbone needs (e.g. `in_dim`), known once `fit` has run."""


class VectorFeatures(FeatureSet):
    """Fixed-length vectors (descriptors, fingerprints) held in memory as one tensor.

    Non-finite values are imputed with training means and counted; with `standardize`
    every column is scaled to zero mean and unit variance on the training set.
    """

    def __init__(self, standardize: bool = True) -> None:
        self.standardize = standardize
        self.imputer = TrainImputer()
        self.mean: np.ndarray | None = None
        self.scale: np.ndarray | None = None
        self.imputed: dict[str, int] = {}

    def fit(self, store: FeatureStore, train_ids: np.ndarray) -> dict:
        train = store.matrix(train_ids).astype(np.float64)
        self.imputer.fit(train)
        filled, n_imputed = self.imputer.transform(train)
        self.imputed["train"] = n_imputed
        if self.standardize:
            self.mean = filled.mean(axis=0)
            std = filled.std(axis=0)
            self.scale = np.where(std > 0, std, 1.0)
        return {
            "imputed_train_values": n_imputed,
            "columns_without_training_values": len(self.imputer.empty_columns),
        }

    def dims(self) -> dict[str, int]:
        return {"in_dim": len(self.imputer.means)}

    def matrix(self, store: FeatureStore, mol_ids: np.ndarray, name: str) -> np.ndarray:
        filled, n_imputed = self.imputer.transform(store.matrix(mol_ids).astype(np.float64))
        self.imputed[name] = n_imputed
        if self.standardize:
            filled = (filled - self.mean) / self.scale
        return np.clip(filled, -FLOAT32_MAX, FLOAT32_MAX).astype(np.float32)

    def dataset(
        self, store: FeatureStore, mol_ids: np.ndarray, y: np.ndarray, name: str
    ) -> Dataset:
        return TensorSet(torch.from_numpy(self.matrix(store, mol_ids, name)), y)

    def collate(self, items: list[dict]) -> dict:
        return items[0]  # TensorSet.__getitems__ already built the batch


class TensorSet(Dataset):
    """Rows of a feature tensor with their targets and positions."""

    def __init__(self, x: torch.Tensor, y: np.ndarray) -> None:
        self.x = x
        self.y = torch.as_tensor(y, dtype=torch.float32)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> dict:
        return {"x": self.x[i], "y": self.y[i], "index": i}

    def __getitems__(self, indices: list[int]) -> list[dict]:
        """Batched access, so a batch is three tensor gathers and not B dict builds."""
        idx = torch.as_tensor(indices)
        return [{"x": self.x[idx], "y": self.y[idx], "index": idx}]

