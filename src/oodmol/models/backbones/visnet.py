"""ViSNet (Wang et al., "Enhancing geometric representations for molecules with equivariant
vector-scalar interactive message passing", Nature Communications 15, 313, 2024), PyTorch
Geometric's model.

PyG's `ViSNetBlock` is the representation: an atom embedding refined by a neighbour
embedding, then `num_layers` ViS-MP layers that update scalar atom features, vector atom
features (spherical harmonics of the edge directions up to `lmax`) and scalar edge
features, with runtime geometry (the vector-rejection dot products), and final layer
norms. ViSNet's QM9 output model (`EquivariantScalar`) is two gated equivariant blocks,
hidden → hidden/2 → 1, whose scalar outputs are summed over atoms. Changes:

- the forward of `ViSNetBlock` and its ViS-MP layers is ours (`representation`,
  `vis_mp`), on PyG's modules and parameters (state-dict keys unchanged): the same
  function in fewer operations (tests check it against PyG's forward, outputs and
  gradients, in float64). The edge update's two Linears act on the atoms' vector
  features before the per-edge gather (PyG applies them to every edge's gathered copy,
  (l_max + 1)² − 1 rows per edge, the largest matmuls of its step), the dot product of
  the two vector rejections is taken in closed form, the cutoff is computed once, and
  gathers and sums are direct tensor ops instead of `MessagePassing`;

- the neighbour search inside `ViSNetBlock.distance` is swapped for `Distance` below,
  the same edges and self-loops from `oodmol.models.neighbors.radius_graph` (PyG's calls
  torch-cluster);
- the output: the first gated block is PyG's; of the second, only the part that reaches
  the scalar output is kept, [x ‖ |W v|] → Linear → SiLU (its vector gate only fed PyG's
  `v.sum() * 0`), and its last Linear is the shared head. The backbone returns these
  per-atom vectors (`hidden_channels // 2` wide); the task's readout sums (extensive) or
  averages (intensive, where ViSNet's `reduce_op` would be "mean") them, and the head maps
  them to the property: ViSNet's output with one bias per molecule instead of per atom.

Its `Atomref` prior and `mean`/`std` are left out: targets are standardised by the module.
The scalar output is invariant to rotations, reflections, translations and permutations:
vector features only enter scalars through dot products and norms over their (3 + 5)
components, on which O(3) acts orthogonally (real spherical harmonics), and no cross
product is used.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn.models import visnet

from oodmol.data.batches import PointCloudBatch
from oodmol.models.neighbors import radius_graph


class Distance(visnet.Distance):
    """PyG's ViSNet `Distance` on `radius_graph`: edges j → i within the cutoff (at most
    `max_num_neighbors` per atom i) and, with `add_self_loops`, one loop per atom; returns
    the edges, their lengths (0 for loops) and vectors r_j − r_i."""

    def forward(
        self, pos: torch.Tensor, batch: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        edge_index = radius_graph(pos, batch, self.cutoff, self.max_num_neighbors)
        edge_vec = pos[edge_index[0]] - pos[edge_index[1]]
        edge_weight = edge_vec.norm(dim=-1)
        if self.add_self_loops:
            atoms = torch.arange(len(pos), device=pos.device)
            edge_index = torch.cat([edge_index, torch.stack([atoms, atoms])], dim=1)
            edge_vec = torch.cat([edge_vec, pos.new_zeros(len(pos), 3)])
            edge_weight = torch.cat([edge_weight, pos.new_zeros(len(pos))])
        return edge_index, edge_weight, edge_vec


class ViSNet(nn.Module):
    """PyG's `ViSNetBlock` and ViSNet's scalar output model up to its last hidden layer;
    returns `(h, segment)` with `h` of width `hidden_channels // 2`."""

    def __init__(
        self,
        lmax: int = 2,
        vecnorm_type: str | None = "max_min",
        trainable_vecnorm: bool = False,
        num_heads: int = 8,
        num_layers: int = 9,
        hidden_channels: int = 512,
        num_rbf: int = 64,
        trainable_rbf: bool = False,
        max_z: int = 100,
        cutoff: float = 5.0,
        max_neighbors: int = 32,
        vertex: bool = False,
    ) -> None:
        super().__init__()
        self.representation = visnet.ViSNetBlock(
            lmax=lmax,
            vecnorm_type=vecnorm_type,
            trainable_vecnorm=trainable_vecnorm,
            num_heads=num_heads,
            num_layers=num_layers,
            hidden_channels=hidden_channels,
            num_rbf=num_rbf,
            trainable_rbf=trainable_rbf,
            max_z=max_z,
            cutoff=cutoff,
            max_num_neighbors=max_neighbors,
            vertex=vertex,
        )
        self.representation.distance = Distance(cutoff, max_neighbors)
        half = hidden_channels // 2
        self.gated = visnet.GatedEquivariantBlock(hidden_channels, half, scalar_activation=True)
        # the second gated block's path to its scalar output, minus the final Linear
        self.vec_proj = nn.Linear(half, half, bias=False)
        self.lin = nn.Linear(2 * half, half)
        self.act = nn.SiLU()
        self.out_dim = half
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """PyG's initialisation (Xavier-uniform weights, zero biases)."""
        self.representation.reset_parameters()
        self.gated.reset_parameters()
        nn.init.xavier_uniform_(self.vec_proj.weight)
        nn.init.xavier_uniform_(self.lin.weight)
        self.lin.bias.data.zero_()

    def forward(self, batch: PointCloudBatch) -> tuple[torch.Tensor, torch.Tensor]:
        segment = batch.molecule
        x, v = representation(self.representation, batch.z, batch.pos, segment)
        x, v = self.gated(x, v)
        x = torch.cat([x, torch.norm(self.vec_proj(v), dim=-2)], dim=-1)
        return self.act(self.lin(x)), segment


def representation(
    block: visnet.ViSNetBlock, z: torch.Tensor, pos: torch.Tensor, segment: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """`ViSNetBlock.forward`'s function with our ViS-MP layers (`vis_mp`), the cutoff
    of the edge lengths computed once for all of them."""
    x = block.embedding(z)
    edge_index, edge_weight, edge_vec = block.distance(pos, segment)
    edge_attr = block.distance_expansion(edge_weight)
    mask = edge_index[0] != edge_index[1]
    edge_vec[mask] = edge_vec[mask] / torch.norm(edge_vec[mask], dim=1).unsqueeze(1)
    edge_vec = block.sphere(edge_vec)
    x = block.neighbor_embedding(z, x, edge_index, edge_weight, edge_attr)
    vec = x.new_zeros(x.size(0), (block.lmax + 1) ** 2 - 1, x.size(1))
    edge_attr = block.edge_embedding(edge_index, edge_attr, x)
    cut = block.vis_mp_layers[0].cutoff(edge_weight)
    for layer in block.vis_mp_layers:
        dx, dvec, dedge_attr = vis_mp(layer, x, vec, edge_index, cut, edge_attr, edge_vec)
        x, vec = x + dx, vec + dvec
        if dedge_attr is not None:
            edge_attr = edge_attr + dedge_attr
    return block.out_norm(x), block.vec_out_norm(vec)


def rejection_dot(a: torch.Tensor, b: torch.Tensor, d_ij: torch.Tensor) -> torch.Tensor:
    """Σ_m of the product of the rejections of `a` and `b` [E, M, C] from `d_ij` [E, M],
    per channel, without forming the rejections: with a' = a − (a·d) d and
    b' = b − (b·(−d))(−d) = b − (b·d) d, a'·b' = a·b − (a·d)(b·d)(2 − d·d)."""
    a_d = torch.einsum("emc,em->ec", a, d_ij)
    b_d = torch.einsum("emc,em->ec", b, d_ij)
    d_d = (d_ij * d_ij).sum(dim=1, keepdim=True)
    return (a * b).sum(dim=1) - a_d * b_d * (2.0 - d_d)


def vis_mp(
    layer: visnet.ViS_MP,
    x: torch.Tensor,
    vec: torch.Tensor,
    edge_index: torch.Tensor,
    cut: torch.Tensor,
    f_ij: torch.Tensor,
    d_ij: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """PyG's `ViS_MP.forward` (residual updates of atom scalars, atom vectors and edge
    scalars), with the edge update's two Linears applied to the atoms' vector features
    before they are gathered per edge instead of after (a Linear commutes with a
    gather: N · ((l_max + 1)² − 1) rows instead of E · ((l_max + 1)² − 1)), the dot
    product of the two rejections in closed form (`rejection_dot`), and the gathers and
    sums written with `gather`/`scatter_add_` (channel-expanded indices, faster than
    `index_select` on CPU for the 2-d features) and `index_select`/`index_add_` (the
    vector features) instead of `MessagePassing`."""
    source, target = edge_index
    n_edges, heads, width = len(source), layer.num_heads, layer.hidden_channels
    x = layer.layernorm(x)
    vec = layer.vec_layernorm(vec)
    at_source = source.unsqueeze(-1).expand(-1, width)
    at_target = target.unsqueeze(-1).expand(-1, width)
    q = layer.q_proj(x).gather(0, at_target).view(n_edges, heads, -1)
    k = layer.k_proj(x).gather(0, at_source).view(n_edges, heads, -1)
    v = layer.v_proj(x).gather(0, at_source).view(n_edges, heads, -1)
    dk = F.silu(layer.dk_proj(f_ij)).view(n_edges, heads, -1)
    dv = F.silu(layer.dv_proj(f_ij)).view(n_edges, heads, -1)
    vec1, vec2, vec3 = torch.split(layer.vec_proj(vec), width, dim=-1)
    vec_dot = (vec1 * vec2).sum(dim=1)

    attn = F.silu((q * k * dk).sum(dim=-1)) * cut.unsqueeze(1)
    v_j = (v * dv * attn.unsqueeze(2)).view(n_edges, width)
    s1, s2 = torch.split(F.silu(layer.s_proj(v_j)), width, dim=1)
    vec_j = vec.index_select(0, source) * s1.unsqueeze(1) + s2.unsqueeze(1) * d_ij.unsqueeze(2)
    x_out = v_j.new_zeros(x.shape[0], width).scatter_add_(0, at_target, v_j)
    vec_out = vec_j.new_zeros(vec.shape).index_add_(0, target, vec_j)

    o1, o2, o3 = torch.split(layer.o_proj(x_out), width, dim=1)
    dx = vec_dot * o2 + o3
    dvec = vec3 * o1.unsqueeze(1) + vec_out
    if layer.last_layer:
        return dx, dvec, None
    w_dot = rejection_dot(
        layer.w_trg_proj(vec).index_select(0, target),
        layer.w_src_proj(vec).index_select(0, source),
        d_ij,
    )
    df_ij = F.silu(layer.f_proj(f_ij)) * w_dot
    return dx, dvec, df_ij
