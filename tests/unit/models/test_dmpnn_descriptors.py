"""The D-MPNN with descriptors beside each graph (Chemprop's X_d): they join the pooled
embedding before the FFN, and nowhere else."""

from __future__ import annotations

import pytest
import torch

from oodmol.data.batches import GraphBatch
from oodmol.models.backbones.dmpnn import DMPNN


def batch(x_d: torch.Tensor | None) -> GraphBatch:
    torch.manual_seed(0)
    edges = torch.tensor([[0, 1, 1, 2, 3, 4], [1, 0, 2, 1, 4, 3]])
    return GraphBatch(
        x=torch.randn(5, 6),
        edge_index=edges,
        edge_attr=torch.randn(6, 2),
        molecule=torch.tensor([0, 0, 0, 1, 1]),
        index=torch.arange(2),
        x_d=x_d,
    )


def test_the_descriptors_join_the_pooled_graph_before_the_ffn() -> None:
    torch.manual_seed(1)
    model = DMPNN(atom_dim=6, bond_dim=2, hidden=8, descriptor_dim=3, ffn_layers=1)
    x_d = torch.randn(2, 3)
    b = batch(x_d)
    pooled = model.pool(model.encode(b.x, b.edge_index, b.edge_attr), b.molecule, 2)
    expected = model.ffn(torch.cat([pooled, x_d], dim=1))
    torch.testing.assert_close(model(b), expected)
    assert model.ffn[0].in_features == 8 + 3
    changed = batch(x_d + 1.0)
    assert not torch.allclose(model(changed), model(b))  # the FFN reads them


def test_a_model_that_reads_descriptors_refuses_a_batch_without() -> None:
    model = DMPNN(atom_dim=6, bond_dim=2, hidden=8, descriptor_dim=3)
    with pytest.raises(ValueError, match="descriptors beside each graph"):
        model(batch(None))
