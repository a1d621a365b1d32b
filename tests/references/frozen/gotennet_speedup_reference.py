"""GotenNet as it was before it was made faster: a frozen copy of
`src/oodmol/models/backbones/gotennet.py` at commit 89bd68d, less `from_reference_state_dict`,
kept as the reference that the faster model must reproduce with identical weights
(`test_gotennet_speedup_equivalence.py`) and as the baseline of speed comparisons. Not to
be edited: change the model, not this.

It shares the building blocks of `oodmol.models.blocks` (neighbour search, distances,
cutoff, radial basis, initialisation) and the readout of `oodmol.models.output_modules`
with the live code; those have tests of their own. The model's description is the live
module's docstring.
"""

from __future__ import annotations

import itertools
import math

import torch
from e3nn import o3
from torch import nn
from torch_geometric.utils import softmax

from oodmol.data.batches import PointCloudBatch
from oodmol.models.blocks import (
    CosineCutoff,
    Distance,
    Edges,
    ExpNormalBasis,
    xavier_init_linears,
)
from oodmol.models.output_modules import AtomFeatureBackbone, ScalarOutput


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


class GATA(nn.Module):
    """Geometry-aware tensor attention and, unless `last_layer`, the edge update (HTR):
    returns the new (h, X, t)."""

    def __init__(
        self,
        hidden: int,
        heads: int,
        lmax: int,
        cutoff: float,
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
        self.cutoff = CosineCutoff(cutoff)
        self.last_layer = last_layer
        if not last_layer:
            self.gamma_t = MLP([hidden, hidden], last_activation=True)
            self.W_vq = Dense(hidden, hidden, bias=False)
            self.W_vk = nn.ModuleList(Dense(hidden, hidden, bias=False) for _ in range(lmax))

    def forward(
        self,
        h: torch.Tensor,
        X: torch.Tensor,
        t: torch.Tensor,
        edges: Edges,
        harmonics: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        n, e = h.shape[0], t.shape[0]
        heads, d, hidden, lmax = self.heads, self.hidden // self.heads, self.hidden, self.lmax
        j, i = edges.index
        q = self.W_q(h).view(n, heads, d).index_select(0, i)
        k = self.W_k(h).view(n, heads, d).index_select(0, j)
        scores = (q * k * self.W_re(t).view(e, heads, d)).sum(-1)
        attention = softmax(scores, i, num_nodes=n) / math.sqrt(hidden)
        attention = nn.functional.dropout(attention, self.dropout, self.training)
        values = attention.unsqueeze(-1) * self.gamma_v(h).index_select(0, j).view(e, heads, -1)
        spatial = self.W_rs(t) * self.gamma_s(h).index_select(0, j)
        spatial = spatial * self.cutoff(edges.length).unsqueeze(-1)
        messages = (values.view(e, -1) + spatial).view(e, 1 + 2 * lmax, hidden).unbind(1)
        h = h + sum_into(messages[0], i, n)
        sizes = degree_sizes(lmax)
        dX = []  # per degree l: Σ_j o_d^(l) r̂_ij^(l) + o_t^(l) ∘ X_j^(l)
        parts = zip(harmonics.split(sizes, 1), X.split(sizes, 1), strict=True)
        for k, (r, X_l) in enumerate(parts):  # k = l − 1
            o_d, o_t = messages[1 + k].unsqueeze(1), messages[1 + lmax + k].unsqueeze(1)
            dX.append(sum_into(r.unsqueeze(-1) * o_d + X_l.index_select(0, j) * o_t, i, n))
        X = X + torch.cat(dX, dim=1)
        if not self.last_layer:
            t = t + self.gamma_t(t) * self.edge_weights(X, edges, harmonics)
        return h, X, t

    def edge_weights(self, X: torch.Tensor, edges: Edges, harmonics: torch.Tensor) -> torch.Tensor:
        """Σ_l ⟨EQ_i^(l) ⊥ r̂^(l), EK_j^(l) ⊥ r̂^(l)⟩ per edge and channel, [E, F]."""
        j, i = edges.index
        sizes = degree_sizes(self.lmax)
        keys = [w(part) for w, part in zip(self.W_vk, X.split(sizes, dim=1), strict=True)]
        eq = self.W_vq(X).index_select(0, i)
        ek = torch.cat(keys, dim=1).index_select(0, j)
        weights = (eq * ek).sum(1)
        parts = zip(eq.split(sizes, 1), ek.split(sizes, 1), harmonics.split(sizes, 1), strict=True)
        for a, b, r in parts:
            r = r.unsqueeze(1)  # [E, 1, 2l + 1]: (a · r̂) as a batched matrix product
            weights = weights - (r @ a).squeeze(1) * (r @ b).squeeze(1)
        return weights


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


class GotenNet(AtomFeatureBackbone):
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
        super().__init__()
        if lmax < 1:
            raise ValueError(f"lmax must be at least 1, not {lmax}")
        self.hidden = hidden
        self.cutoff = cutoff
        self.max_neighbors = max_neighbors
        self.distance = Distance(cutoff, max_neighbors, loop=True)
        self.node_init = NodeInit(hidden, num_rbf, cutoff, max_z)
        self.edge_init = EdgeInit(num_rbf, hidden)
        self.radial_basis = ExpNormalBasis(num_rbf, cutoff)
        self.A_na = nn.Embedding(max_z, hidden, padding_idx=0)
        irreps = o3.Irreps([(1, (degree, (-1) ** degree)) for degree in range(1, lmax + 1)])
        self.sphere = o3.SphericalHarmonics(irreps, normalize=False, normalization="norm")
        self.gata_list = nn.ModuleList(
            GATA(hidden, heads, lmax, cutoff, attn_dropout, last_layer=k == layers - 1)
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
        X = h.new_zeros(h.shape[0], harmonics.shape[1], self.hidden)
        for gata, eqff in zip(self.gata_list, self.eqff_list, strict=True):
            h, X, t = gata(h, X, t, edges, harmonics)
            h, X = eqff(h, X)
        return h, X
