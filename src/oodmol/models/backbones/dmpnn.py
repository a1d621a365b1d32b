"""Chemprop's directed message-passing network (D-MPNN), written natively.

Reproduces Chemprop v2's `BondMessagePassing` → aggregation → FFN hidden layers (its
defaults: hidden 300, depth 3, no bias in W_i/W_h, ReLU, "norm" aggregation, one FFN
layer of 300); the shared `RegressionHead` adds the FFN's output layer. Verified against
Chemprop itself with identical weights (tests/references/test_chemprop_equivalence.py).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from oodmol.data.batches import GraphBatch
from oodmol.errors import InputError
from oodmol.models.heads import dense_layers

Aggregation = Literal["norm", "mean", "sum"]


class DMPNN(nn.Module):
    """Directed bond message passing on a batch from `GraphFeatures` (Yang et al. 2019).

    Hidden states live on directed edges u→v, starting from a⁰ = W_i [x_u ‖ e_uv] and
    h⁰ = τ(a⁰). Each of the `depth - 1` updates sums the states entering u except the
    one from v (the reverse edge), mᵗ = Σ_w hᵗ⁻¹_wu - hᵗ⁻¹_vu, and sets
    hᵗ = dropout(τ(a⁰ + W_h mᵗ)); atoms then read their incoming edges,
    h_v = dropout(τ(W_o [x_v ‖ Σ_u h_uv])). The reverse of edge e is e ^ 1 (`Graph2D`
    stores each bond's two directions next to each other).

    Molecules are pooled here, not by the shared readout, because Chemprop's default
    "norm" aggregation (sum / `norm`) is neither the readout's sum nor its mean; "mean"
    and "sum" are Chemprop's other options. Chemprop uses the same aggregation for
    every task, so `task.extensive` does not change it. `ffn_layers` hidden layers of
    `ffn_hidden` (ReLU, dropout) follow, as in Chemprop's `RegressionFFN`. With
    `descriptor_dim`, each molecule's vector beside its graph (`batch.x_d`, scaled on the
    training set) joins the pooled embedding before the FFN, as Chemprop's extra
    descriptors (`X_d`) do.
    """

    def __init__(
        self,
        atom_dim: int,
        bond_dim: int,
        hidden: int = 300,
        depth: int = 3,
        dropout: float = 0.0,
        bias: bool = False,
        aggregation: Aggregation = "norm",
        norm: float = 100.0,
        ffn_layers: int = 1,
        ffn_hidden: int | None = None,
        descriptor_dim: int = 0,
    ) -> None:
        super().__init__()
        if depth < 1:
            raise ValueError(f"depth must be at least 1, got {depth}")
        if aggregation not in ("norm", "mean", "sum"):
            raise ValueError(f"aggregation must be norm, mean or sum, got {aggregation!r}")
        self.W_i = nn.Linear(atom_dim + bond_dim, hidden, bias=bias)
        self.W_h = nn.Linear(hidden, hidden, bias=bias)
        self.W_o = nn.Linear(atom_dim + hidden, hidden)
        self.depth = depth
        self.dropout = nn.Dropout(dropout)
        self.aggregation = aggregation
        self.norm = norm
        self.descriptor_dim = descriptor_dim
        dims = [hidden + descriptor_dim, *[ffn_hidden or hidden] * ffn_layers]
        self.ffn = nn.Sequential(*dense_layers(dims, dropout))
        self.out_dim = dims[-1]

    def encode(
        self, x: torch.Tensor, edge_index: torch.Tensor, edge_attr: torch.Tensor
    ) -> torch.Tensor:
        """Atom embeddings [atoms, hidden] after message passing."""
        source, target = edge_index
        reverse = torch.arange(len(source), device=source.device) ^ 1
        a0 = self.W_i(torch.cat([x.index_select(0, source), edge_attr], dim=1))
        h = torch.relu(a0)
        # a⁰ + W_h m as one matrix product with accumulation (W_h's bias, if any, in a⁰)
        base = a0 if self.W_h.bias is None else a0 + self.W_h.bias
        for _ in range(self.depth - 1):
            incoming = self._incoming(h, target, len(x))
            message = incoming.index_select(0, source) - h.index_select(0, reverse)
            h = self.dropout(torch.relu_(torch.addmm(base, message, self.W_h.weight.t())))
        atoms = torch.cat([x, self._incoming(h, target, len(x))], dim=1)
        return self.dropout(torch.relu(self.W_o(atoms)))

    @staticmethod
    def _incoming(h: torch.Tensor, target: torch.Tensor, n_atoms: int) -> torch.Tensor:
        """Sum of the edge states entering each atom."""
        return h.new_zeros(n_atoms, h.shape[1]).index_add_(0, target, h)

    def pool(self, h: torch.Tensor, segment: torch.Tensor, n_molecules: int) -> torch.Tensor:
        pooled = h.new_zeros(n_molecules, h.shape[1]).index_add_(0, segment, h)
        if self.aggregation == "norm":
            return pooled / self.norm
        if self.aggregation == "mean":
            counts = torch.bincount(segment, minlength=n_molecules).clamp(min=1)
            return pooled / counts.unsqueeze(1).to(h.dtype)
        return pooled

    def forward(self, batch: GraphBatch) -> torch.Tensor:
        h = self.encode(batch.x, batch.edge_index, batch.edge_attr)
        pooled = self.pool(h, batch.molecule, len(batch))
        if self.descriptor_dim:
            if batch.x_d is None:
                raise InputError(
                    f"model.module.backbone.descriptor_dim={self.descriptor_dim}: the D-MPNN "
                    "reads descriptors beside each graph and its batches have none: set "
                    "model.features.vectors (model=chemprop_descriptors does), or drop it"
                )
            pooled = torch.cat([pooled, batch.x_d.to(pooled.dtype)], dim=1)
        return self.ffn(pooled)
