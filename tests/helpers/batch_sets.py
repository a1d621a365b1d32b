"""Small sets of every kind a device can hold: vectors, graphs with vectors beside them,
point clouds."""

from __future__ import annotations

import numpy as np
import torch

from oodmol.data.batches import GraphBatch, PointCloudBatch
from oodmol.data.features import BatchedDataset, GraphSet, TensorSet

POINT_FIELDS = ("z", "pos", "fragment")


def chains(n: int = 5, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """`n` chain molecules of 2, 3, ... atoms, with graph and point-cloud fields."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        atoms = 2 + i
        bonds = np.array([np.arange(atoms - 1), np.arange(1, atoms)])
        out.append(
            {
                "x": rng.normal(size=(atoms, 3)).astype(np.float32),
                "edge_index": np.concatenate([bonds, bonds[::-1]], axis=1),
                "edge_attr": rng.normal(size=(2 * (atoms - 1), 2)).astype(np.float32),
                "z": rng.integers(1, 9, atoms),
                "pos": rng.normal(size=(atoms, 3)).astype(np.float32),
                "fragment": np.zeros(atoms, np.int64),
            }
        )
    return out


def small_sets() -> dict[str, BatchedDataset]:
    y = np.arange(5, dtype=np.float64)
    x_d = torch.arange(10, dtype=torch.float32).reshape(5, 2)
    points = [{k: g[k] for k in POINT_FIELDS} for g in chains()]
    return {
        "vectors": TensorSet(torch.arange(15, dtype=torch.float32).reshape(5, 3), y),
        "graphs": GraphSet(chains(), y, GraphBatch, x_d=x_d),
        "point clouds": GraphSet(points, None, PointCloudBatch, POINT_FIELDS, edge_fields=()),
    }


def batch_tensors(batch) -> dict[str, torch.Tensor]:
    return {k: v for k, v in vars(batch).items() if isinstance(v, torch.Tensor)}
