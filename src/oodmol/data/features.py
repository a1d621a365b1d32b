"""From cached features to batches: what a model reads, with train-only statistics."""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod

import numpy as np
import torch
from torch.utils.data import Dataset

from oodmol.data.batches import Batch, GraphBatch, PointCloudBatch, VectorBatch
from oodmol.data.featurize.impute import TrainImputer
from oodmol.data.store import FeatureStore
from oodmol.errors import InputError

FLOAT32_MAX = float(np.finfo(np.float32).max)


class FeatureSet(ABC):
    """How one kind of cached feature becomes torch batches.

    `fit` sees the training molecules only (imputation values, scaling), so nothing
    about validation or test molecules leaks into what a model reads. What it learnt
    travels in every checkpoint (`state_dict`), so a trained model reads new molecules
    exactly as it read its training ones (`oodmol predict`).
    """

    @abstractmethod
    def fit(self, store: FeatureStore, train_ids: np.ndarray) -> dict:
        """Learn training statistics; returns facts for the data report."""

    @abstractmethod
    def dataset(
        self, store: FeatureStore, mol_ids: np.ndarray, y: np.ndarray | None, name: str
    ) -> Dataset:
        """A dataset of the molecules of set `name` (targets `y`, None when predicting)
        whose batched access returns one typed batch (`oodmol.data.batches`)."""

    def collate(self, items: list[Batch]) -> Batch:
        return items[0]  # the dataset's __getitems__ already built the batch

    @abstractmethod
    def facts(self) -> dict[str, int]:
        """What a model may be built from (input widths such as `in_dim`; a vocabulary's
        size), known once `fit` has run; `oodmol.data.statistics.FeatureFact` reads them."""

    @abstractmethod
    def state_dict(self) -> dict:
        """What `fit` learnt, as tensors and plain values (a checkpoint loads it
        weights-only)."""

    @abstractmethod
    def load_state_dict(self, state: dict) -> None:
        """Restore what `fit` learnt, instead of fitting again."""


class BatchedDataset(Dataset, ABC):
    """A dataset whose batched access (`__getitems__`, which the DataLoader calls with a
    batch's indices) builds the whole batch at once, as one typed batch in a list of one
    (`FeatureSet.collate` takes it out)."""

    @abstractmethod
    def batch(self, indices: list[int]) -> Batch:
        """The batch of the molecules at `indices`."""

    def __getitem__(self, i: int) -> Batch:
        return self.batch([i])

    def __getitems__(self, indices: list[int]) -> list[Batch]:
        return [self.batch(indices)]

    def on_device(self, device: torch.device) -> BatchedDataset | None:
        """This set with its tensors on `device`, its batches gathered there (no
        collation on the host, no copy per step); None where batches are built on the
        host."""
        return None

    def nbytes(self) -> int:
        """The bytes its tensors take, what a device must hold to keep the set."""
        return 0


# A column whose spread over the training set is below this fraction of the widest
# column's holds rounding noise or a vanishing tail (MBTR's and ACSF's far grid points
# spread by 1e-20): scaled to unit variance, an OOD molecule's 1e-17 there would stand
# 1e3 standard deviations out and dominate a linear model's prediction.
NEGLIGIBLE_SPREAD = 1e-9


class VectorFeatures(FeatureSet):
    """Fixed-length vectors (descriptors, fingerprints) held in memory as one tensor.

    Non-finite values are imputed with training means and counted; with `standardize`
    every column is centred on its training mean and scaled to unit variance, except a
    column constant on the training set or of negligible spread (`NEGLIGIBLE_SPREAD`),
    which is centred only. `field` is the cache's field they are read from (`x_d`: the
    vectors beside a graph).
    """

    def __init__(self, standardize: bool = True, field: str = "x") -> None:
        self.standardize = standardize
        self.field = field
        self.imputer = TrainImputer()
        self.mean: np.ndarray | None = None
        self.scale: np.ndarray | None = None
        self.imputed: dict[str, int] = {}

    def fit(self, store: FeatureStore, train_ids: np.ndarray) -> dict:
        train = store.matrix(train_ids, self.field).astype(np.float64)
        self.imputer.fit(train)
        filled, n_imputed = self.imputer.transform(train)
        self.imputed["train"] = n_imputed
        if self.standardize:
            self.mean = filled.mean(axis=0)
            std = filled.std(axis=0)
            spread = std > NEGLIGIBLE_SPREAD * std.max(initial=0.0)
            self.scale = np.where(spread, std, 1.0)
        return {
            "imputed_train_values": n_imputed,
            "columns_without_training_values": len(self.imputer.empty_columns),
        }

    def facts(self) -> dict[str, int]:
        return {"in_dim": len(self.imputer.means)}

    def state_dict(self) -> dict:
        state = {"imputer_means": torch.from_numpy(self.imputer.means)}
        if self.standardize:
            state |= {"mean": torch.from_numpy(self.mean), "scale": torch.from_numpy(self.scale)}
        return state

    def load_state_dict(self, state: dict) -> None:
        self.imputer.means = state["imputer_means"].numpy()
        if self.standardize:
            self.mean, self.scale = state["mean"].numpy(), state["scale"].numpy()

    def matrix(self, store: FeatureStore, mol_ids: np.ndarray, name: str) -> np.ndarray:
        raw = store.matrix(mol_ids, self.field).astype(np.float64)
        filled, n_imputed = self.imputer.transform(raw)
        self.imputed[name] = n_imputed
        if self.standardize:
            filled = (filled - self.mean) / self.scale
        return np.clip(filled, -FLOAT32_MAX, FLOAT32_MAX).astype(np.float32)

    def dataset(
        self, store: FeatureStore, mol_ids: np.ndarray, y: np.ndarray | None, name: str
    ) -> Dataset:
        return TensorSet(torch.from_numpy(self.matrix(store, mol_ids, name)), y)


class TensorSet(BatchedDataset):
    """Rows of a feature tensor with their targets and positions."""

    def __init__(self, x: torch.Tensor, y: np.ndarray | torch.Tensor | None) -> None:
        self.x = x
        self.y = _targets(y)

    def __len__(self) -> int:
        return len(self.x)

    def batch(self, indices: list[int]) -> VectorBatch:
        """A few tensor gathers, not B item builds."""
        idx = torch.as_tensor(indices, dtype=torch.int64, device=self.x.device)
        y = None if self.y is None else self.y[idx]
        return VectorBatch(x=self.x[idx], y=y, index=idx)

    def on_device(self, device: torch.device) -> TensorSet:
        return TensorSet(self.x.to(device), None if self.y is None else self.y.to(device))

    def nbytes(self) -> int:
        return self.x.nbytes + (0 if self.y is None else self.y.nbytes)


class GraphFeatures(FeatureSet):
    """Molecular graphs (`x`, `edge_index`, `edge_attr` per molecule), batched as one
    disconnected graph (`GraphBatch`). Edges keep their order within each molecule.

    Graph features need no training statistics (they are one-hot flags and scaled
    masses), so `fit` only checks that they are finite and reads their widths. With
    `vectors`, each molecule's vector beside its graph (`x_d`, a `GraphWithVectors`
    cache: Chemprop's extra descriptors) is imputed and scaled on the training set as
    `VectorFeatures` does, and batched as `GraphBatch.x_d`.
    """

    def __init__(self, vectors: VectorFeatures | None = None) -> None:
        self.atom_dim: int | None = None
        self.bond_dim: int | None = None
        self.vectors = vectors
        # graphs are checked finite, never imputed; the vectors beside them may be
        self.imputed: dict[str, int] = {} if vectors is None else vectors.imputed

    def fit(self, store: FeatureStore, train_ids: np.ndarray) -> dict:
        if store.meta["n_nonfinite_values"]:
            raise ValueError(
                f"graph features in {store.path} hold non-finite values (mol_ids "
                f"{store.meta['nonfinite_examples']}); graph features must be finite"
            )
        first = store.get(int(train_ids[0]))
        self.atom_dim = first["x"].shape[1]
        self.bond_dim = first["edge_attr"].shape[1]
        facts = {"atom_dim": self.atom_dim, "bond_dim": self.bond_dim}
        if self.vectors is not None:
            if "x_d" not in first:
                raise InputError(
                    f"model.features.vectors reads vectors beside each graph, and the "
                    f"featurizer's cache {store.path.name} holds graphs alone: use a "
                    f"featurizer that sets them beside (model=chemprop_descriptors), or "
                    f"drop model.features.vectors"
                )
            facts |= self.vectors.fit(store, train_ids)
        return facts

    def facts(self) -> dict[str, int]:
        facts = {"atom_dim": self.atom_dim, "bond_dim": self.bond_dim}
        if self.vectors is not None:
            facts["descriptor_dim"] = self.vectors.facts()["in_dim"]
        return facts

    def state_dict(self) -> dict:
        state = {"atom_dim": self.atom_dim, "bond_dim": self.bond_dim}
        if self.vectors is not None:
            state["vectors"] = self.vectors.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.atom_dim, self.bond_dim = state["atom_dim"], state["bond_dim"]
        if (self.vectors is None) != ("vectors" not in state):
            raise ValueError(
                "the checkpoint's graph features and the config's differ in the vectors "
                "beside the graphs (model.features.vectors)"
            )
        if self.vectors is not None:
            self.vectors.load_state_dict(state["vectors"])

    def dataset(
        self, store: FeatureStore, mol_ids: np.ndarray, y: np.ndarray | None, name: str
    ) -> Dataset:
        beside = None
        if self.vectors is not None:
            beside = torch.from_numpy(self.vectors.matrix(store, mol_ids, name))
        return GraphSet(list(store.iter_arrays(mol_ids)), y, GraphBatch, x_d=beside)


class GraphSet(BatchedDataset):
    """The graphs of one set, concatenated into flat tensors with per-molecule offsets
    (`atom_ptr`, `edge_ptr`), so a batch is a few vectorised gathers instead of a Python
    loop over molecules (PyG's `Batch.from_data_list` takes 2.5-3 times as long for
    the same batches, see bench/chemprop_throughput.py).

    `atom_fields` have one row per atom and `edge_fields` one per edge; `edge_index`
    (if the graphs have it) is shifted to batch positions. 3D point clouds have no
    edges (models build their own neighbour graphs), so theirs are empty. A batch is a
    `batch_type` of those fields, `molecule`, `y` and `index`, and `x_d` where the
    molecules have vectors beside their graphs (one row each)."""

    def __init__(
        self,
        graphs: list[dict[str, np.ndarray]],
        y: np.ndarray | None,
        batch_type: type[GraphBatch] | type[PointCloudBatch],
        atom_fields: tuple[str, ...] = ("x",),
        edge_fields: tuple[str, ...] = ("edge_attr",),
        x_d: torch.Tensor | None = None,
    ) -> None:
        def ptr(counts: list[int]) -> torch.Tensor:
            return torch.as_tensor(np.concatenate([[0], np.cumsum(counts)]), dtype=torch.int64)

        def cat(field: str, axis: int = 0) -> torch.Tensor:
            if not graphs:  # an empty set (protocol=boom's validation set): never indexed
                return torch.empty(0)
            return torch.from_numpy(np.concatenate([g[field] for g in graphs], axis))

        self.has_edges = bool(graphs) and "edge_index" in graphs[0]
        self.atom_ptr = ptr([len(g[atom_fields[0]]) for g in graphs])
        self.edge_ptr = ptr([g["edge_index"].shape[1] if self.has_edges else 0 for g in graphs])
        # the counts on the host too: a batch's sizes without waiting for its device
        self.n_atoms, self.n_edges = np.diff(self.atom_ptr.numpy()), np.diff(self.edge_ptr.numpy())
        self.atoms = {field: cat(field) for field in atom_fields}
        self.edges = {field: cat(field) for field in edge_fields}
        # atom positions within the molecule; shifted to batch positions when batched
        self.edge_index = cat("edge_index", 1) if self.has_edges else None
        self.y = _targets(y)
        self.batch_type = batch_type
        self.x_d = x_d

    def __len__(self) -> int:
        return len(self.atom_ptr) - 1

    @property
    def atom_counts(self) -> np.ndarray:
        """Atoms per molecule, what size-grouped batches sort by."""
        return self.n_atoms

    def batch(self, indices: list[int]) -> GraphBatch | PointCloudBatch:
        device = self.atom_ptr.device
        idx = torch.as_tensor(indices, dtype=torch.int64, device=device)
        atom_start, n_atoms = self.atom_ptr[idx], self.atom_ptr[idx + 1] - self.atom_ptr[idx]
        n_atom_total = int(self.n_atoms[indices].sum())
        atom_shift = torch.cumsum(n_atoms, 0) - n_atoms  # first atom of each molecule in the batch
        atoms = torch.arange(n_atom_total, device=device) + torch.repeat_interleave(
            atom_start - atom_shift, n_atoms, output_size=n_atom_total
        )
        segment = torch.repeat_interleave(
            torch.arange(len(idx), device=device), n_atoms, output_size=n_atom_total
        )
        fields = {field: values[atoms] for field, values in self.atoms.items()}
        if self.has_edges:
            edge_start = self.edge_ptr[idx]
            n_edges = self.edge_ptr[idx + 1] - edge_start
            n_edge_total = int(self.n_edges[indices].sum())
            edge_shift = torch.cumsum(n_edges, 0) - n_edges
            edges = torch.arange(n_edge_total, device=device) + torch.repeat_interleave(
                edge_start - edge_shift, n_edges, output_size=n_edge_total
            )
            fields["edge_index"] = self.edge_index[:, edges] + torch.repeat_interleave(
                atom_shift, n_edges, output_size=n_edge_total
            )
            fields.update({field: values[edges] for field, values in self.edges.items()})
        if self.x_d is not None:
            fields["x_d"] = self.x_d[idx]
        y = None if self.y is None else self.y[idx]
        return self.batch_type(**fields, molecule=segment, y=y, index=idx)

    def on_device(self, device: torch.device) -> GraphSet:
        moved = copy.copy(self)
        for name, value in self._tensors().items():
            if isinstance(value, dict):
                setattr(moved, name, {field: t.to(device) for field, t in value.items()})
            else:
                setattr(moved, name, value.to(device))
        return moved

    def nbytes(self) -> int:
        return sum(
            sum(t.nbytes for t in value.values()) if isinstance(value, dict) else value.nbytes
            for value in self._tensors().values()
        )

    def _tensors(self) -> dict[str, torch.Tensor | dict[str, torch.Tensor]]:
        names = ("atom_ptr", "edge_ptr", "atoms", "edges", "edge_index", "y", "x_d")
        return {name: value for name in names if (value := getattr(self, name)) is not None}


class PointCloudFeatures(FeatureSet):
    """Atoms in 3D (`Graph3D`), batched as `PointCloudBatch`.

    Coordinates are used as they are: the models are invariant to where a molecule sits,
    and its size in Ångström is physics, not a statistic to scale away. `fit` checks the
    training coordinates are finite (a cache with non-finite ones is refused)."""

    def __init__(self) -> None:
        self.imputed: dict[str, int] = {}  # nothing is imputed

    def fit(self, store: FeatureStore, train_ids: np.ndarray) -> dict:
        if store.meta["n_nonfinite_values"]:
            raise ValueError(
                f"3D features in {store.path} hold non-finite values (mol_ids "
                f"{store.meta['nonfinite_examples']}); coordinates must be finite"
            )
        return {}

    def facts(self) -> dict[str, int]:
        return {}

    def state_dict(self) -> dict:
        return {}  # coordinates are read as they are: nothing is learnt

    def load_state_dict(self, state: dict) -> None:
        pass

    def dataset(
        self, store: FeatureStore, mol_ids: np.ndarray, y: np.ndarray | None, name: str
    ) -> Dataset:
        graphs = list(store.iter_arrays(mol_ids))
        fields = ("z", "pos", "fragment")
        return GraphSet(graphs, y, PointCloudBatch, atom_fields=fields, edge_fields=())


def _targets(y: np.ndarray | torch.Tensor | None) -> torch.Tensor | None:
    return None if y is None else torch.as_tensor(y, dtype=torch.float32)
