"""Tiny PyTorch Geometric 3D models and the glue that lets PyG's own forwards run here:
shared by the tests that hold our SchNet, DimeNet++ and ViSNet to PyG's."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.nn.models import dimenet

from oodmol.models.backbones.dimenetpp import triplets
from oodmol.models.backbones.schnet import SchNet
from oodmol.models.backbones.visnet import ViSNet
from oodmol.models.neighbors import radius_graph
from oodmol.models.readout import Readout

# sympy derives DimeNet++'s spherical basis in its constructor: ~1 s for 2 × 2 functions,
# ~40 s for the published 7 × 6
TINY_DIMENETPP = dict(
    hidden_channels=16,
    num_blocks=2,
    int_emb_size=8,
    basis_emb_size=4,
    out_emb_channels=16,
    num_spherical=2,
    num_radial=2,
    num_output_layers=1,
)


def tiny_schnet() -> SchNet:
    return SchNet(hidden_channels=16, num_filters=16, num_interactions=2, num_gaussians=10)


def tiny_visnet() -> ViSNet:
    return ViSNet(num_heads=2, num_layers=2, hidden_channels=16, num_rbf=8)


def summed_head(h: torch.Tensor, segment: torch.Tensor, n: int, weight: torch.Tensor):
    """The shared readout (sum) and a bias-free head with `weight`: [n]."""
    return (Readout(extensive=True)(h, segment, n) @ weight.T).squeeze(-1)


def give_pyg_dimenet_our_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    """PyG's DimeNet++ forward with our neighbour search and triplets (its own need
    torch-cluster and torch-sparse), in PyG's argument and return orders."""

    def pyg_triplets(edge_index, num_nodes):
        idx_kj, idx_ji, idx_k, idx_i = triplets(edge_index, num_nodes)
        row, col = edge_index
        return col, row, idx_i, row[idx_ji], idx_k, idx_kj, idx_ji

    def pyg_radius_graph(pos, r, batch, max_num_neighbors):
        return radius_graph(pos, batch, r, max_num_neighbors)

    monkeypatch.setattr(dimenet, "radius_graph", pyg_radius_graph)
    monkeypatch.setattr(dimenet, "triplets", pyg_triplets)
