"""What a model reads: one batch type per kind of feature.

Every batch knows how many molecules it holds (`len(batch)`) from their positions in
their set (`index`), so a batch of unlabelled molecules (prediction: `y` is None) is as
complete as a training batch. Lightning moves dataclasses to the device field by field;
a loader with `pin_memory` calls `Batch.pin_memory` (PyTorch pins only the containers it
knows), so a GPU run's host-to-device copies can overlap with compute.

- `VectorBatch` (descriptors, fingerprints): `x` [molecules, width].
- `GraphBatch` (2D graphs): `x` [atoms, atom width], `edge_index` [2, bonds],
  `edge_attr` [bonds, bond width], `molecule` [atoms]; `x_d` [molecules, width] where
  the features set molecule-level vectors beside the graphs.
- `PointCloudBatch` (3D conformers): `z` [atoms], `pos` [atoms, 3] in Å, `molecule` [atoms].
- `TokenBatch` (SMILES tokens): `input_ids` and `attention_mask` [molecules, length].

Graphs and point clouds are one disconnected graph per batch, in PyTorch Geometric's
layout: `edge_index` counts atoms from the batch's first, and `molecule` (PyG's `batch`)
is each atom's molecule, sorted.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import torch


@dataclass(kw_only=True)
class Batch:
    """What every batch has: each molecule's position in its set, and its target."""

    index: torch.Tensor  # int64 [molecules]
    y: torch.Tensor | None = None  # float32 [molecules]; None when predicting

    def __len__(self) -> int:
        return self.index.numel()

    def pin_memory(self) -> Batch:
        """The same batch in page-locked host memory (needs a CUDA device)."""
        return self._each_tensor(torch.Tensor.pin_memory)

    def to(self, device: torch.device | str) -> Batch:
        """The same batch on `device`; optional fields that are None stay None."""
        return self._each_tensor(lambda tensor: tensor.to(device))

    def _each_tensor(self, change) -> Batch:
        changed = {
            f.name: change(value)
            for f in fields(self)
            if isinstance(value := getattr(self, f.name), torch.Tensor)
        }
        return replace(self, **changed)


@dataclass(kw_only=True)
class VectorBatch(Batch):
    x: torch.Tensor


@dataclass(kw_only=True)
class GraphBatch(Batch):
    x: torch.Tensor
    edge_index: torch.Tensor
    edge_attr: torch.Tensor
    molecule: torch.Tensor
    x_d: torch.Tensor | None = None  # vectors beside the graphs (Chemprop's descriptors)


@dataclass(kw_only=True)
class PointCloudBatch(Batch):
    z: torch.Tensor
    pos: torch.Tensor
    molecule: torch.Tensor
    fragment: torch.Tensor | None = None  # covalent fragment of each atom, where known


@dataclass(kw_only=True)
class TokenBatch(Batch):
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
