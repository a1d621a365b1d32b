"""DimeNet++ (Gasteiger et al., "Fast and Uncertainty-Aware Directional Message Passing
for Non-Equilibrium Molecules", 2020), PyTorch Geometric's model.

PyG's DimeNet++ blocks supply every layer and parameter (`DimeNetPlusPlus`'s state-dict
keys, less the output Linears, see below): the Bessel radial basis with the polynomial
envelope, the embedding block, `num_blocks` interaction blocks that pass
directional messages over edge triplets k → j → i, and `num_blocks + 1` output blocks.
The forward is ours, the same function in fewer operations (tests check it against
PyG's forward, outputs and gradients, in float64):

- geometry and both bases once for all blocks, as PyG does;
- the embedding block's Linear over [x_i ‖ x_j ‖ rbf] applied to the atoms' parts per
  atom, then gathered per edge;
- each interaction's bias-free Linear pairs (radial 6 → 8 → hidden, spherical 42 → 8 →
  64) as one product matrix: the spherical pair runs over every triplet, where an
  8-wide inner dimension makes a slow matmul;
- triplet and edge gathers and sums with channel-expanded `gather`/`scatter_add_`
  (indexing's backward is a sorting `index_put_` on CPU), and SiLU as one op (PyG's
  swish is x · sigmoid(x)).

Besides, for three reasons:

- the spherical (angle) basis is computed numerically
  (`oodmol.models.blocks.spherical_basis`): PyG derives it with sympy, about 20 s per
  process at 7 × 6 functions;
- neighbours come from `oodmol.models.neighbors.radius_graph` (PyG calls torch-cluster's),
  and the triplets from `triplets` below, in pure torch (PyG's `triplets` needs
  torch-sparse, which has no fallback in PyG 2.8);
- the output. DimeNet++ adds the output blocks' per-atom outputs, each ending in its own
  Linear(out_emb_channels, 1, bias=False), and sums over atoms. Here every output block
  stops before that Linear and the backbone returns the concatenation of the blocks'
  per-atom vectors, `(num_blocks + 1) * out_emb_channels` wide; the task's readout sums or
  averages them, and the shared head's Linear holds the final Linears side by side:
  head(Σ_atoms [h_0 ‖ … ‖ h_B]) = Σ_b w_b · Σ_atoms h_b + c, DimeNet++'s output exactly,
  plus one bias per molecule (the original has none). The final weights start from the
  head's initialisation, not DimeNet++'s zeros / Glorot-orthogonal choice.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn.models import dimenet
from torch_geometric.nn.resolver import activation_resolver

from oodmol.data.batches import PointCloudBatch
from oodmol.models.blocks.spherical_basis import SphericalBasis
from oodmol.models.neighbors import radius_graph


def triplets(
    edge_index: torch.Tensor, num_nodes: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every pair of edges k → j and j → i with k ≠ i, in the order of PyG's
    `dimenet.triplets` (edges j → i in turn; for each, the edges into j by ascending k).

    Returns `(idx_kj, idx_ji, idx_k, idx_i)`: the two edges' indices into `edge_index`
    (row 0 source, row 1 target) and the outer atoms k and i of each triplet.
    """
    source, target = edge_index
    # edges grouped by target atom, sources ascending within a group (CSR over targets)
    order = torch.argsort(target * num_nodes + source)
    in_degree = torch.bincount(target, minlength=num_nodes)
    first_in = torch.cumsum(in_degree, 0) - in_degree
    # for each edge j → i, one triplet per edge entering j
    per_edge = in_degree[source]
    idx_ji = torch.repeat_interleave(torch.arange(len(source), device=source.device), per_edge)
    start = torch.cumsum(per_edge, 0) - per_edge
    rank = torch.arange(len(idx_ji), device=source.device) - start[idx_ji]
    idx_kj = order[first_in[source[idx_ji]] + rank]
    keep = source[idx_kj] != target[idx_ji]  # no k → j → k back-and-forth
    idx_kj, idx_ji = idx_kj[keep], idx_ji[keep]
    return idx_kj, idx_ji, source[idx_kj], target[idx_ji]


class DimeNetPP(nn.Module):
    """PyG's DimeNet++ layers with pure-torch neighbours and triplets and a numerical
    spherical basis; returns `(h, segment)`, the output blocks' per-atom vectors side by
    side, for the shared readout and head. The state dict is `DimeNetPlusPlus`'s, less
    the output blocks' final Linears."""

    def __init__(
        self,
        hidden_channels: int = 128,
        num_blocks: int = 4,
        int_emb_size: int = 64,
        basis_emb_size: int = 8,
        out_emb_channels: int = 256,
        num_spherical: int = 7,
        num_radial: int = 6,
        cutoff: float = 5.0,
        max_neighbors: int = 32,
        envelope_exponent: int = 5,
        num_before_skip: int = 1,
        num_after_skip: int = 2,
        num_output_layers: int = 3,
    ) -> None:
        super().__init__()
        act = activation_resolver("swish")
        self.cutoff, self.max_num_neighbors = cutoff, max_neighbors
        self.rbf = dimenet.BesselBasisLayer(num_radial, cutoff, envelope_exponent)
        self.sbf = SphericalBasis(num_spherical, num_radial, cutoff, envelope_exponent)
        self.emb = dimenet.EmbeddingBlock(num_radial, hidden_channels, act)
        self.output_blocks = nn.ModuleList(
            dimenet.OutputPPBlock(
                num_radial, hidden_channels, out_emb_channels, 1, num_output_layers, act
            )
            for _ in range(num_blocks + 1)
        )
        self.interaction_blocks = nn.ModuleList(
            dimenet.InteractionPPBlock(
                hidden_channels,
                int_emb_size,
                basis_emb_size,
                num_spherical,
                num_radial,
                num_before_skip,
                num_after_skip,
                act,
            )
            for _ in range(num_blocks)
        )
        for block in self.output_blocks:
            # the final Linear moves to the shared head; with no initializer named,
            # PyG's `reset_parameters` skips it
            block.lin = nn.Identity()
            block.output_initializer = None
        self.reset_parameters()
        self.out_dim = (num_blocks + 1) * out_emb_channels

    def reset_parameters(self) -> None:
        """PyG's initialisation, in its order."""
        self.rbf.reset_parameters()
        self.emb.reset_parameters()
        for block in [*self.output_blocks, *self.interaction_blocks]:
            block.reset_parameters()

    def forward(self, batch: PointCloudBatch) -> tuple[torch.Tensor, torch.Tensor]:
        z, pos, segment = batch.z, batch.pos, batch.molecule
        n_atoms = len(z)
        edge_index = radius_graph(pos, segment, self.cutoff, self.max_num_neighbors)
        j, i = edge_index
        idx_kj, idx_ji, idx_k, idx_i = triplets(edge_index, n_atoms)
        idx_j = j[idx_ji]

        dist = (pos[i] - pos[j]).pow(2).sum(dim=-1).sqrt()
        # the angle between r_ij and r_jk, from atan2(|a × b|, a · b) as PyG computes it
        pos_ij, pos_jk = pos[idx_i] - pos[idx_j], pos[idx_j] - pos[idx_k]
        angle = torch.atan2(
            torch.linalg.cross(pos_ij, pos_jk).norm(dim=-1), (pos_ij * pos_jk).sum(dim=-1)
        )
        rbf = self.rbf(dist)
        sbf = self.sbf(dist, angle, idx_kj)
        # gather/scatter with indices expanded over the channels: on CPU faster than
        # indexing (whose backward is a sorting index_put) on the same rows
        hidden = self.emb.lin.out_features
        width = self.interaction_blocks[0].lin_down.out_features if self.interaction_blocks else 1
        edges_of_atoms = i.unsqueeze(-1).expand(-1, hidden)
        sources = j.unsqueeze(-1).expand(-1, hidden)
        into_kj = idx_kj.unsqueeze(-1).expand(-1, width)
        onto_ji = idx_ji.unsqueeze(-1).expand(-1, width)

        x = embedding(self.emb, z, rbf, edges_of_atoms, sources)
        outputs = [output_block(self.output_blocks[0], x, rbf, edges_of_atoms, n_atoms)]
        for block, output in zip(self.interaction_blocks, self.output_blocks[1:], strict=True):
            x = interaction(block, x, rbf, sbf, into_kj, onto_ji)
            outputs.append(output_block(output, x, rbf, edges_of_atoms, n_atoms))
        return torch.cat(outputs, dim=-1), segment


def embedding(
    block: dimenet.EmbeddingBlock,
    z: torch.Tensor,
    rbf: torch.Tensor,
    at_i: torch.Tensor,
    at_j: torch.Tensor,
) -> torch.Tensor:
    """PyG's `EmbeddingBlock`, its Linear over [x_i ‖ x_j ‖ rbf] split into three: the
    atoms' parts computed per atom, then gathered per edge (`at_i`, `at_j`: each edge's
    atoms i and j, expanded over the channels)."""
    x = block.emb(z)
    w_i, w_j, w_rbf = block.lin.weight.split(x.shape[-1], dim=1)
    rbf = F.silu(block.lin_rbf(rbf))
    return F.silu(
        F.linear(rbf, w_rbf, block.lin.bias)
        + (x @ w_i.T).gather(0, at_i)
        + (x @ w_j.T).gather(0, at_j)
    )


def residual(layer: dimenet.ResidualLayer, x: torch.Tensor) -> torch.Tensor:
    return x + F.silu(layer.lin2(F.silu(layer.lin1(x))))


def interaction(
    block: dimenet.InteractionPPBlock,
    x: torch.Tensor,
    rbf: torch.Tensor,
    sbf: torch.Tensor,
    into_kj: torch.Tensor,
    onto_ji: torch.Tensor,
) -> torch.Tensor:
    """PyG's `InteractionPPBlock` with its bias-free Linear pairs (radial 6 → 8 → hidden,
    spherical 42 → 8 → 64) each applied as one product matrix: the spherical pair runs
    over every triplet, and an 8-wide inner dimension is a slow matmul on CPU."""
    x_ji = F.silu(block.lin_ji(x))
    x_kj = F.silu(block.lin_kj(x))
    x_kj = x_kj * F.linear(rbf, block.lin_rbf2.weight @ block.lin_rbf1.weight)
    x_kj = F.silu(block.lin_down(x_kj))
    triplet = F.linear(sbf, block.lin_sbf2.weight @ block.lin_sbf1.weight)
    triplet = x_kj.gather(0, into_kj) * triplet
    x_kj = triplet.new_zeros(len(x_kj), triplet.shape[-1]).scatter_add_(0, onto_ji, triplet)
    h = x_ji + F.silu(block.lin_up(x_kj))
    for layer in block.layers_before_skip:
        h = residual(layer, h)
    h = F.silu(block.lin(h)) + x
    for layer in block.layers_after_skip:
        h = residual(layer, h)
    return h


def output_block(
    block: dimenet.OutputPPBlock,
    x: torch.Tensor,
    rbf: torch.Tensor,
    edges_of_atoms: torch.Tensor,
    n_atoms: int,
) -> torch.Tensor:
    """PyG's `OutputPPBlock` without its final Linear (the shared head holds it)."""
    x = block.lin_rbf(rbf) * x
    x = x.new_zeros(n_atoms, x.shape[-1]).scatter_add_(0, edges_of_atoms, x)
    x = block.lin_up(x)
    for lin in block.lins:
        x = F.silu(lin(x))
    return x
