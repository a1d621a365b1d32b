"""BOOM's topological GNN (TGNN): E(n)-GNN-style message passing on the bond graph alone.

Follows BOOM's `TopologicalGNN` (experiments/gnn-ablation/models.py in FLASK-LLNL/BOOM,
read for its architecture; this is our own code): hidden 64, four `GCL` layers with SiLU,
messages m_ij = φ_e(h_i, h_j, e_ij) summed over bonded neighbours, residual node updates
h_i ← h_i + φ_h(h_i, Σ_j m_ij), then a per-atom decoder Linear → Softsign → Linear whose
outputs are summed or averaged over the molecule.

Deviations, all deliberate:
- inputs are `Graph2D` features (Chemprop v2's atom/bond multi-hots, with explicit
  hydrogens as BOOM had them), a superset of BOOM's H/C/N/O/F and bond-type one-hots;
  BOOM's extra embedding of the atomic number is left out, since a linear map of the
  element one-hot already gives every element its own vector;
- the decoder's last Linear is the shared head, applied after the task's readout
  (mean for intensive, sum for extensive tasks, as BOOM chose per property): for a sum
  this moves the output bias from once per atom to once per molecule.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from oodmol.data.batches import GraphBatch


class GCL(nn.Module):
    """One layer: edge MLP on [h_i ‖ h_j ‖ e_ij], summed at i; node MLP on [h_i ‖ m_i],
    added to h_i (BOOM's `GCL` without attention, coordinates or normalisation).

    e_ij = A f_ij + a is the shared bond embedding (`edge_embedding`, a Linear) of the raw
    bond features f_ij. The edge MLP's first Linear is split and regrouped,
    W [h_i ‖ h_j ‖ e_ij] + b = (W_i h)_i + (W_j h)_j + (W_e A) f_ij + (W_e a + b), so the
    atoms are projected before the gather (about two directed bonds per atom) and the
    bonds from their few raw features instead of from hidden-sized vectors: half the
    multiply-adds of the plain form, with its weights and its arithmetic.
    """

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.edge_mlp = nn.Sequential(
            nn.Linear(3 * hidden, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU()
        )
        self.node_mlp = nn.Sequential(
            nn.Linear(2 * hidden, hidden), nn.SiLU(), nn.Linear(hidden, hidden)
        )

    def forward(
        self,
        h: torch.Tensor,
        edge_index: torch.Tensor,
        edge_features: torch.Tensor,
        edge_embedding: nn.Linear,
    ) -> torch.Tensor:
        """Edges j → i: row 0 of `edge_index` the sources j, row 1 the targets i."""
        source, target = edge_index
        first = self.edge_mlp[0]
        on_target, on_source, on_edge = first.weight.split(h.shape[-1], dim=1)
        atom_part = F.linear(h, torch.cat([on_target, on_source]))  # [W_i h ‖ W_j h]
        to_target, from_source = atom_part.split(h.shape[-1], dim=-1)
        edge_weight = on_edge @ edge_embedding.weight
        edge_bias = on_edge @ edge_embedding.bias + first.bias
        edge_part = F.linear(edge_features, edge_weight, edge_bias)
        message = self.edge_mlp[1:](to_target[target] + from_source[source] + edge_part)
        # summed in the messages' dtype (bf16 under autocast), which index_add_ needs
        received = message.new_zeros(h.shape).index_add_(0, target, message)
        return h + self.node_mlp(torch.cat([h, received], dim=1))


class TGNN(nn.Module):
    """Atom and bond embeddings, `layers` GCLs, then a per-atom Linear + Softsign; returns
    per-atom vectors for the shared readout and head."""

    def __init__(self, atom_dim: int, bond_dim: int, hidden: int = 64, layers: int = 4) -> None:
        super().__init__()
        self.atom_embedding = nn.Linear(atom_dim, hidden)
        self.bond_embedding = nn.Linear(bond_dim, hidden)
        self.layers = nn.ModuleList(GCL(hidden) for _ in range(layers))
        self.decoder = nn.Sequential(nn.Linear(hidden, hidden), nn.Softsign())
        self.out_dim = hidden

    def forward(self, batch: GraphBatch) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.atom_embedding(batch.x)
        for layer in self.layers:
            h = layer(h, batch.edge_index, batch.edge_attr, self.bond_embedding)
        return self.decoder(h), batch.molecule
