"""An atom-reference prior: a fixed per-element term added to a model's prediction, in
the property's units (MACE's E0s, schnetpack's and TorchMD-Net's atomrefs).

The offsets are fitted on the training molecules only (`oodmol.data.statistics
.AtomReferenceFit`) and the network learns what they leave; the regressor standardises
that remainder with its own training mean and spread. Any point-cloud model can ask for
it in its YAML:

    statistics:
      atom_reference: {_target_: oodmol.data.statistics.AtomReferenceFit}
"""

from __future__ import annotations

import torch
from torch import nn
from torch_geometric.utils import scatter

from oodmol.data.batches import Batch, PointCloudBatch


class AtomReference(nn.Module):
    """Σ_i E_{z_i} per molecule, [B]; an element without an offset (absent from the
    training molecules) contributes 0."""

    def __init__(self, offsets: dict[str, float], max_z: int = 119) -> None:
        super().__init__()
        table = torch.zeros(max_z)
        for z, offset in offsets.items():
            if not 0 < int(z) < max_z:
                raise ValueError(
                    f"atomic number {z} of the atom reference is not in 1 … {max_z - 1}"
                )
            table[int(z)] = offset
        self.register_buffer("offsets", table)

    def forward(self, batch: Batch) -> torch.Tensor:
        if not isinstance(batch, PointCloudBatch):
            raise TypeError(
                "an atom reference needs the atoms' elements (point clouds), "
                f"not {type(batch).__name__}"
            )
        return scatter(self.offsets[batch.z.long()], batch.molecule, dim=0, dim_size=len(batch))
