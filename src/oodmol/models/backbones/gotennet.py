"""GotenNet (Aykent & Xia, "GotenNet: rethinking efficient 3D equivariant graph neural
networks", ICLR 2025), written from the paper with the authors' `gotennet` package 1.1.2
(`models/representation/gotennet.py`, `models/components/layers.py`) read for the
details; this is our own code, on e3nn's spherical harmonics and PyTorch Geometric.

Every atom carries scalar features h [N, F] and steerable features X [N, 8, F]: for each
channel an l = 1 (3 components) and an l = 2 (5 components) part, in e3nn's basis and
order (irreps 1x1o+1x2e: X(Rr) = D(R) X(r) with `Irreps("1x1o+1x2e").D_from_matrix(R)`);
every edge j → i carries scalar features t_ij [E, F].

- Neighbours within the cutoff (5 Å), at most `max_neighbors` nearest per atom, plus a
  self-loop per atom (r = 0, no direction: its spherical harmonics are 0).
- Initial features: φ(r), 64 exponential-normal radial functions times a cosine cutoff;
  h_i = W_nrd_nru[A_na(z_i) ‖ Σ_{j≠i} A_nbr(z_j) ∘ W_ndp φ(r_ij) f_cut(r_ij)] (paper
  eqs. 1-2; W_nrd_nru: Linear → LayerNorm → SiLU → Linear); t_ij = (h_i + h_j) ∘
  W_erp φ(r_ij) (eq. 3); X = 0; r̂_ij^(l) the l = 1, 2 spherical harmonics of r̂_ij.
- Each of the layers is GATA, then (but for the last layer) the edge update HTR, then EQFF:
  - GATA: per-head attention α_ij = softmax_j(Σ_k q_ik k_jk W_re(t_ij)_k) / √F, with
    dropout, over i's edges; the messages [o_s, o_d^(1..L), o_t^(1..L)] = α_ij γ_v(h_j) +
    W_rs(t_ij) ∘ γ_s(h_j) f_cut(r_ij) give Δh_i = Σ_j o_s and ΔX_i^(l) = Σ_j o_d^(l)
    r̂_ij^(l) + o_t^(l) ∘ X_j^(l) (one channel block per degree for directions and for
    tensors: upstream's sep_dir and sep_tensor);
  - HTR: with EQ = W_vq X and EK^(l) = W_vk^(l) X^(l), t_ij += γ_t(t_ij) ∘ Σ_l
    ⟨EQ_i^(l) ⊥ r̂_ij^(l), EK_j^(l) ⊥ r̂_ij^(l)⟩, the inner products of the parts of EQ and
    EK orthogonal to the edge's own harmonics (computed as ⟨a, b⟩ − ⟨a, r̂⟩⟨b, r̂⟩, equal
    for unit r̂^(l) and for the self-loops' r̂ = 0);
  - EQFF: with X' = W_vu X, m1, m2 = γ_m[h ‖ √(|X'|² + ε)]: h += m1, X += m2 ∘ X'.
- Upstream's QM9 settings are used throughout: no layer norms inside the layers, no
  edge scaling by the neighbour count (scale_edge false), summed messages. For lmax ≥ 3
  the l ≥ 3 components are e3nn's spherical harmonics; upstream's (its `TensorInit`) are
  not normalised alike, so the two models agree for lmax ≤ 2 only.

The edge geometry the layers read (cutoff, the harmonics in per-degree blocks, a padded
per-atom layout of the edges) is computed once per batch (`edge_geometry`); the sums over
an atom's edges of r̂ ⊗ o_d are batched matrix products in that layout.

Scalars see the geometry only through distances and inner products of same-degree
harmonics, so the output is invariant under rotations, reflections (the l = 1 parts
change sign, the l = 2 parts do not: O(3), not only SO(3)), translations and atom
permutations; X transforms with e3nn's D(R) of 1x1o+1x2e, reflections included.

Readout (`oodmol.models.output_modules.ScalarOutput`): upstream's `Atomwise` head, the
per-atom MLP F → 256 → 1 (SiLU), summed (extensive) or averaged (intensive) by the
shared readout; the backbone ends at the 256 SiLU units and the shared head is the last
Linear, whose bias is then added once per molecule.

Parameter names are upstream's: our state dict is the reference representation's, less
the duplicate names its MLPs register (`from_reference_state_dict`); the output MLP's
first layer is upstream's `out_net.1.out_net.0`, the shared head's Linear its
`out_net.1.out_net.1`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from typing import NamedTuple

import torch
from e3nn import o3
from torch import nn
from torch_geometric.utils import softmax

from oodmol.data.batches import PointCloudBatch
from oodmol.models.blocks import (
    CosineCutoff,
    Edges,
    ExpNormalBasis,
    xavier_init_linears,
)
from oodmol.models.output_modules import MessagePassingBackbone, ScalarOutput


class Dense(nn.Linear):
    """A Linear layer, then a LayerNorm (with `layer_norm`) and SiLU (with `activation`):
    upstream's `Dense`, so that the parameter names are its own (`weight`, `bias`,
    `norm.weight`, `norm.bias`)."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        activation: bool = False,
        layer_norm: bool = False,
    ) -> None:
        super().__init__(in_features, out_features, bias)
        self.norm = nn.LayerNorm(out_features) if layer_norm else None
        self.activation = nn.SiLU() if activation else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = super().forward(x)
        if self.norm is not None:
            y = self.norm(y)
        return y if self.activation is None else self.activation(y)


class MLP(nn.Module):
    """Dense layers of widths `dims` (upstream's `MLP`, its layers under `dense_layers`):
    the hidden ones with `activation` and `layer_norm`, the last one with SiLU only if
    `last_activation`."""

    def __init__(
        self,
        dims: list[int],
        activation: bool = False,
        last_activation: bool = False,
        layer_norm: bool = False,
    ) -> None:
        super().__init__()
        hidden = [
            Dense(a, b, activation=activation, layer_norm=layer_norm)
            for a, b in itertools.pairwise(dims[:-1])
        ]
        last = Dense(dims[-2], dims[-1], activation=last_activation)
        self.dense_layers = nn.ModuleList([*hidden, last])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.dense_layers:
            x = layer(x)
        return x


def sum_into(src: torch.Tensor, index: torch.Tensor, n: int) -> torch.Tensor:
    """Σ of the rows of `src` [E, ...] per `index` [E] into n rows (`index_add_`, whose
    gradient is a plain row gather)."""
    return src.new_zeros((n, *src.shape[1:])).index_add_(0, index, src)


def degree_sizes(lmax: int) -> list[int]:
    """The number of components, 2l + 1, of each degree l = 1 … lmax."""
    return [2 * degree + 1 for degree in range(1, lmax + 1)]


class NodeInit(nn.Module):
    """The initial scalar features of the atoms (paper eqs. 1-2): an atom's embedding
    with its neighbours' embeddings weighted by their distances."""

    def __init__(self, hidden: int, num_rbf: int, cutoff: float, max_z: int) -> None:
        super().__init__()
        self.A_nbr = nn.Embedding(max_z, hidden)
        self.W_ndp = MLP([num_rbf, hidden])
        self.W_nrd_nru = MLP([2 * hidden, hidden, hidden], activation=True, layer_norm=True)
        self.cutoff = CosineCutoff(cutoff)

    def forward(
        self, z: torch.Tensor, h: torch.Tensor, edges: Edges, rbf: torch.Tensor
    ) -> torch.Tensor:
        j, i = edges.index
        weight = self.cutoff(edges.length) * (j != i)  # self-loops weigh nothing
        messages = self.A_nbr(z).index_select(0, j) * self.W_ndp(rbf) * weight.unsqueeze(-1)
        neighbours = sum_into(messages, i, h.shape[0])
        return self.W_nrd_nru(torch.cat([h, neighbours], dim=-1))


class EdgeInit(nn.Module):
    """The initial edge features t_ij = (h_i + h_j) ∘ W_erp φ(r_ij) (paper eq. 3)."""

    def __init__(self, num_rbf: int, hidden: int) -> None:
        super().__init__()
        self.W_erp = nn.Linear(num_rbf, hidden)

    def forward(self, edges: Edges, rbf: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        j, i = edges.index
        return (h.index_select(0, i) + h.index_select(0, j)) * self.W_erp(rbf)


class EdgeGeometry(NamedTuple):
    """What the layers read of the edges, computed once per batch for all of them.

    Edges are sorted by target (`oodmol.models.neighbors`), at most K into each atom, so
    that a sum over an atom's edges of a per-edge matrix times a per-edge vector is one
    batched matrix product over atoms in a padded layout (edge e of target i in slot
    i·K + its rank among i's edges) instead of an [E, S, F] temporary summed by scatter.
    """

    source: torch.Tensor  # j [E]
    target: torch.Tensor  # i [E], sorted
    cutoff: torch.Tensor  # f_cut(r_ij) [E, 1]
    slot: torch.Tensor  # [E]: i·K + rank of the edge among i's edges
    width: int  # K, the most edges into one atom
    blocks: torch.Tensor  # [E, lmax, S]: r̂^(l) in row l (degree l's columns), 0 elsewhere
    spread: torch.Tensor  # [N, S, K·lmax]: the blocks of i's k-th edge in columns k·lmax …


def edge_geometry(
    edges: Edges, harmonics: torch.Tensor, cutoff: torch.Tensor, lmax: int, n: int
) -> EdgeGeometry:
    """The `EdgeGeometry` of a batch of n atoms from its edges, their harmonics [E, S] of
    degrees 1 … lmax and their cutoff values [E]."""
    j, i = edges.index
    e, s = harmonics.shape
    counts = torch.bincount(i, minlength=n)
    width = int(counts.max()) if e else 1
    slot = i * width + torch.arange(e, device=i.device) - (torch.cumsum(counts, 0) - counts)[i]
    sizes = torch.tensor(degree_sizes(lmax), device=i.device)
    degrees = torch.arange(lmax, device=i.device)
    in_degree = torch.repeat_interleave(degrees, sizes) == degrees.unsqueeze(1)  # [lmax, S]
    blocks = harmonics.unsqueeze(1) * in_degree  # [E, lmax, S]: r̂^(l) in row l
    spread = padded(blocks.reshape(e, lmax * s), slot, n * width).view(n, width * lmax, s)
    return EdgeGeometry(j, i, cutoff.unsqueeze(-1), slot, width, blocks, spread.mT)


def padded(src: torch.Tensor, slot: torch.Tensor, rows: int) -> torch.Tensor:
    """The rows of `src` [E, C] placed at `slot` of `rows` rows of zeros."""
    return src.new_zeros(rows, src.shape[1]).index_copy(0, slot, src)


class GATA(nn.Module):
    """Geometry-aware tensor attention and, unless `last_layer`, the edge update (HTR):
    returns the new (h, X, t)."""

    def __init__(
        self,
        hidden: int,
        heads: int,
        lmax: int,
        dropout: float,
        last_layer: bool,
    ) -> None:
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden ({hidden}) must be a multiple of heads ({heads})")
        self.hidden, self.heads, self.lmax, self.dropout = hidden, heads, lmax, dropout
        width = (1 + 2 * lmax) * hidden  # o_s, then o_d and o_t for each degree
        self.gamma_s = nn.Sequential(Dense(hidden, hidden, activation=True), Dense(hidden, width))
        self.W_q = Dense(hidden, hidden)
        self.W_k = Dense(hidden, hidden)
        self.gamma_v = nn.Sequential(Dense(hidden, hidden, activation=True), Dense(hidden, width))
        self.W_re = Dense(hidden, hidden, activation=True)
        self.W_rs = Dense(hidden, width)
        self.last_layer = last_layer
        if not last_layer:
            self.gamma_t = MLP([hidden, hidden], last_activation=True)
            self.W_vq = Dense(hidden, hidden, bias=False)
            self.W_vk = nn.ModuleList(Dense(hidden, hidden, bias=False) for _ in range(lmax))

    def forward(
        self, h: torch.Tensor, X: torch.Tensor, t: torch.Tensor, g: EdgeGeometry
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        n, e = h.shape[0], t.shape[0]
        heads, d, hidden, lmax = self.heads, self.hidden // self.heads, self.hidden, self.lmax
        j, i = g.source, g.target
        q = self.W_q(h).view(n, heads, d).index_select(0, i)
        k = self.W_k(h).view(n, heads, d).index_select(0, j)
        scores = (q * k * self.W_re(t).view(e, heads, d)).sum(-1)
        attention = softmax(scores, i, num_nodes=n) / math.sqrt(hidden)
        attention = nn.functional.dropout(attention, self.dropout, self.training)
        # W_rs(t) f_cut as one product: [t f_cut, f_cut] @ [W_rsᵀ; b_rs]
        weight = torch.cat([self.W_rs.weight.T, self.W_rs.bias.unsqueeze(0)])
        spatial = torch.cat([t * g.cutoff, g.cutoff], dim=1) @ weight
        spatial = spatial * self.gamma_s(h).index_select(0, j)
        values = self.gamma_v(h).index_select(0, j).view(e, heads, -1)
        messages = torch.addcmul(spatial.view(e, heads, -1), values, attention.unsqueeze(-1))
        # one split (its gradient one concatenation, where indexing would zero [E, 5, F] each)
        o_s, o_d, o_t = messages.view(e, 1 + 2 * lmax, hidden).split([1, lmax, lmax], dim=1)
        h = h + sum_into(o_s.squeeze(1), i, n)
        # Σ_j o_d^(l) r̂_ij^(l): one matrix product per atom over its padded edges
        o_d = o_d.reshape(e, lmax * hidden)
        directions = torch.bmm(g.spread, padded(o_d, g.slot, n * g.width).view(n, -1, hidden))
        # Σ_j o_t^(l) ∘ X_j^(l), broadcast over each degree's components
        tensors = [
            sum_into(X_l.index_select(0, j) * o_t_l, i, n)
            for X_l, o_t_l in zip(X.split(degree_sizes(lmax), dim=1), o_t.split(1, 1), strict=True)
        ]
        X = X + directions + torch.cat(tensors, dim=1)
        if not self.last_layer:
            t = t + self.gamma_t(t) * self.edge_weights(X, g)
        return h, X, t

    def edge_weights(self, X: torch.Tensor, g: EdgeGeometry) -> torch.Tensor:
        """Σ_l ⟨EQ_i^(l) ⊥ r̂^(l), EK_j^(l) ⊥ r̂^(l)⟩ per edge and channel, [E, F], as
        ⟨EQ_i, EK_j⟩ − Σ_l ⟨EQ_i^(l), r̂^(l)⟩⟨EK_j^(l), r̂^(l)⟩: the queries' projections
        per atom over its padded edges, the keys' per edge, all degrees at once."""
        sizes = degree_sizes(self.lmax)
        keys = [w(part) for w, part in zip(self.W_vk, X.split(sizes, dim=1), strict=True)]
        queries = self.W_vq(X)
        eq = queries.index_select(0, g.target)
        ek = torch.cat(keys, dim=1).index_select(0, g.source)
        # ⟨EQ_i^(l), r̂^(l)⟩ per atom over its padded edges, ⟨EK_j^(l), r̂^(l)⟩ per edge
        eq_along = torch.bmm(g.spread.mT, queries).view(-1, self.lmax * self.hidden)
        eq_along = eq_along.index_select(0, g.slot).view(-1, self.lmax, self.hidden)
        along = eq_along * torch.bmm(g.blocks, ek)  # [E, lmax, F]
        return (eq * ek).sum(1) - along.sum(1)


class EQFF(nn.Module):
    """The equivariant feed-forward block: h += m1, X += m2 ∘ W_vu X, with m1, m2 from
    an MLP of h and the channel norms of W_vu X."""

    def __init__(self, hidden: int, epsilon: float = 1e-8) -> None:
        super().__init__()
        self.hidden, self.epsilon = hidden, epsilon
        self.gamma_m = nn.Sequential(
            Dense(2 * hidden, hidden, activation=True), Dense(hidden, 2 * hidden)
        )
        self.W_vu = Dense(hidden, hidden, bias=False)

    def forward(self, h: torch.Tensor, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        X_p = self.W_vu(X)
        norms = torch.sqrt(X_p.pow(2).sum(1) + self.epsilon)
        m1, m2 = torch.split(self.gamma_m(torch.cat([h, norms], dim=-1)), self.hidden, dim=-1)
        return h + m1, X + m2.unsqueeze(1) * X_p


class GotenNet(MessagePassingBackbone):
    """GotenNet on point clouds (`z`, `pos`, `molecule`); per-atom vectors for the shared
    readout (see the module docstring).

    Defaults are upstream's QM9 model (configs/model/gotennet.yaml with
    configs/experiment/qm9.yaml): `max_neighbors` caps each atom's neighbours (the nearest
    are kept, the self-loop on top), `output_hidden` is the width of the output MLP.
    """

    def __init__(
        self,
        hidden: int = 256,
        layers: int = 4,
        heads: int = 8,
        lmax: int = 2,
        num_rbf: int = 64,
        cutoff: float = 5.0,
        max_neighbors: int = 32,
        attn_dropout: float = 0.1,
        output_hidden: int = 256,
        max_z: int = 100,
    ) -> None:
        if lmax < 1:
            raise ValueError(f"lmax must be at least 1, not {lmax}")
        super().__init__(hidden, cutoff, max_neighbors, loop=True)
        self.lmax = lmax
        self.envelope = CosineCutoff(cutoff)
        self.node_init = NodeInit(hidden, num_rbf, cutoff, max_z)
        self.edge_init = EdgeInit(num_rbf, hidden)
        self.radial_basis = ExpNormalBasis(num_rbf, cutoff)
        self.A_na = nn.Embedding(max_z, hidden, padding_idx=0)
        irreps = o3.Irreps([(1, (degree, (-1) ** degree)) for degree in range(1, lmax + 1)])
        self.sphere = o3.SphericalHarmonics(irreps, normalize=False, normalization="norm")
        self.gata_list = nn.ModuleList(
            GATA(hidden, heads, lmax, attn_dropout, last_layer=k == layers - 1)
            for k in range(layers)
        )
        self.eqff_list = nn.ModuleList(EQFF(hidden) for _ in range(layers))
        self.output = ScalarOutput(hidden, output_hidden)
        xavier_init_linears(self)  # upstream: Xavier-uniform weights, zero biases

    def embed(self, batch: PointCloudBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """Scalar [N, F] and steerable [N, (lmax + 1)² − 1, F] atom features."""
        z = batch.z
        edges = self.distance(batch.pos, batch.molecule)
        rbf = self.radial_basis(edges.length)
        h = self.node_init(z, self.A_na(z), edges, rbf)
        t = self.edge_init(edges, rbf, h)
        harmonics = self.sphere(edges.direction)  # 0 on self-loops
        cutoff = self.envelope(edges.length)
        geometry = edge_geometry(edges, harmonics, cutoff, self.lmax, len(z))
        X = h.new_zeros(h.shape[0], harmonics.shape[1], self.hidden)
        for gata, eqff in zip(self.gata_list, self.eqff_list, strict=True):
            h, X, t = gata(h, X, t, geometry)
            h, X = eqff(h, X)
        return h, X


def from_reference_state_dict(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our backbone's parameters and buffers from the state dict of the `gotennet`
    package's representation (`GotenNet` or `GotenNetWrapper`): the same names, less the
    second name under which upstream's MLPs register each layer (`<mlp>.layers.k.*`
    beside `<mlp>.dense_layers.k.*`). The output MLP (`output.mlp.0`) is not part of it."""
    return {key: value for key, value in state.items() if ".layers." not in key}
