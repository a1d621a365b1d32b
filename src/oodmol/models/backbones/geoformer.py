"""GeoFormer (Wang et al., "Geometric Transformer with Interatomic Positional Encoding",
NeurIPS 2023), written from the paper with microsoft/AI2BMD's Geoformer branch
(`geoformer/model/modeling_geoformer.py`, `modeling_geoformer_layers.py`) read for the
details; our own code, with the upstream module and parameter names (`geo_encoder.
layers.<k>.self_attn.q_proj` …) so that its checkpoints map one to one (its decoder's
last Linear is our shared head).

Everything lives on dense, padded pair tensors [B, N, N, F] (B molecules of at most N
atoms): pair features e_ij start as SiLU(Linear(RBF(r_ij))), 64 exponential-normal
functions times a cosine cutoff, and are zero for pairs beyond the cutoff. Each of the
layers (post-LayerNorm, like upstream):

- attention of atom i over the atoms j within the cutoff (itself included): the weights
  SiLU(Σ_d q_i k_j SiLU(W_dk e_ij)) · f_cut(r_ij) per head, no softmax; the messages
  weight v_j and are summed, x ← LN(x + Σ_j m_ij);
- interatomic positional encoding (IPE): per-atom vectors u_i = Σ_j W_du m_ij ⊗ r̂_ij
  ([N, 3, F]), two channel mixes w_s, w_t of u, and the pair update
  e_ij ← e_ij + SiLU(W_e e_ij) ⊙ ⟨w_s u_i, w_t u_j⟩ (a dot product over the three spatial
  components, so invariant);
- feed-forward F → 4F → F with SiLU, x ← LN(x + FFN(x)).

The readout is upstream's scalar decoder F → F/2 → 1 (SiLU) per atom; the backbone ends
after its first Linear and SiLU, pooled by the task's readout (upstream sums for every
QM9 target). The last layer's pair update never reaches the output (upstream computes
it and adds `0 · Σ e` to keep its parameters in the graph for DDP): it has no
parameters here, so upstream checkpoints map but for those three unused Linears.
Upstream's `norm_type: none` makes its vector norm the identity, and its dropouts are
0: neither is built. Upstream adds a per-element reference energy (Atomref prior) and
scales by the training std: the project's standardised targets stand in for the
scaling; the prior is not part of this backbone.

Only distances, and dot products of polar vectors, enter the outputs: predictions are
invariant under rotations, reflections, translations and atom permutations. Padded atoms
are masked out of every sum, so a molecule's prediction does not depend on the molecules
that share its batch. Memory grows with B·N²·F: batch molecules of like size
(`group_by_size`), and with `checkpoint_layers` each layer's pair tensors are recomputed
in the backward pass instead of kept (about a third more compute; the same outputs and
gradients), which drugs-sized molecules need: a batch of 32 of the 10k set's keeps
~20 GB of pair tensors otherwise.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint
from torch_geometric.utils import to_dense_batch

from oodmol.data.batches import PointCloudBatch
from oodmol.models.blocks import CosineCutoff, ExpNormalBasis, xavier_init_linears


class GeoformerMultiHeadAttention(nn.Module):
    """Cutoff-weighted SiLU attention with pair features in the weights, and the IPE
    update of the pair features (upstream's class of the same name)."""

    def __init__(
        self, embedding_dim: int, num_heads: int, cutoff: float, update_pairs: bool = True
    ) -> None:
        super().__init__()
        if embedding_dim % num_heads:
            raise ValueError(
                f"embedding_dim {embedding_dim} must be divisible by num_heads {num_heads}"
            )
        self.embedding_dim = embedding_dim
        self.num_heads = num_heads
        self.act = nn.SiLU()
        self.cutoff = CosineCutoff(cutoff)
        self.k_proj = nn.Linear(embedding_dim, embedding_dim)
        self.q_proj = nn.Linear(embedding_dim, embedding_dim)
        self.v_proj = nn.Linear(embedding_dim, embedding_dim)
        self.dk_proj = nn.Linear(embedding_dim, embedding_dim)
        self.update_pairs = update_pairs
        if update_pairs:
            self.du_update_proj = nn.Linear(embedding_dim, embedding_dim)
            self.dihedral_proj = nn.Linear(embedding_dim, 2 * embedding_dim, bias=False)
            self.edge_attr_update = nn.Linear(embedding_dim, embedding_dim)

    def forward(
        self,
        x: torch.Tensor,  # [B, N, F]
        vec: torch.Tensor,  # [B, N, N, 3]: r̂_ij within the cutoff, 0 elsewhere
        dist: torch.Tensor,  # [B, N, N]
        edge_attr: torch.Tensor,  # [B, N, N, F]
        blocked: torch.Tensor,  # [B, N, N]: pairs outside the cutoff or padded
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The attention output [B, N, F] and the pair update (None: `update_pairs` off)."""
        b, n, f = x.shape
        h = self.num_heads
        q = self.q_proj(x).view(b, n, 1, h, f // h)
        k = self.k_proj(x).view(b, 1, n, h, f // h)
        v = self.v_proj(x).view(b, 1, n, h, f // h)
        dk = self.act(self.dk_proj(edge_attr)).view(b, n, n, h, f // h)
        weights = (q * k * dk).sum(-1).masked_fill(blocked.unsqueeze(-1), 0.0)  # [B, N, N, H]
        probs = self.act(weights) * self.cutoff(dist).unsqueeze(-1)
        messages = (probs.unsqueeze(-1) * v).view(b, n, n, f)  # m_ij
        attn = messages.sum(2)
        if not self.update_pairs:
            return attn, None
        # vec is zero outside the graph and on the diagonal: only neighbours j ≠ i add
        du = torch.einsum("bnmf,bnmc->bncf", self.du_update_proj(messages), vec)
        ws, wt = torch.split(self.dihedral_proj(du), f, dim=-1)
        ipe = torch.einsum("bncf,bmcf->bnmf", ws, wt)
        return attn, self.act(self.edge_attr_update(edge_attr)) * ipe


class GeoformerAttnBlock(nn.Module):
    """Attention and IPE, then the feed-forward; post-LayerNorm (upstream's block)."""

    def __init__(
        self,
        embedding_dim: int,
        ffn_embedding_dim: int,
        num_heads: int,
        cutoff: float,
        update_pairs: bool = True,
    ) -> None:
        super().__init__()
        self.self_attn = GeoformerMultiHeadAttention(embedding_dim, num_heads, cutoff, update_pairs)
        # upstream's [Linear, act, Dropout(0), Linear]: the indices of its Linears kept
        self.ffn = nn.Sequential(
            nn.Linear(embedding_dim, ffn_embedding_dim),
            nn.SiLU(),
            nn.Identity(),
            nn.Linear(ffn_embedding_dim, embedding_dim),
        )
        self.attn_layer_norm = nn.LayerNorm(embedding_dim)
        self.final_layer_norm = nn.LayerNorm(embedding_dim)

    def forward(
        self,
        x: torch.Tensor,
        vec: torch.Tensor,
        dist: torch.Tensor,
        edge_attr: torch.Tensor,
        blocked: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        attn, ipe = self.self_attn(x, vec, dist, edge_attr, blocked)
        x = self.attn_layer_norm(x + attn)
        return self.final_layer_norm(x + self.ffn(x)), None if ipe is None else edge_attr + ipe


class GeoformerEncoder(nn.Module):
    """Element embedding, pair features and the layers, on padded tensors."""

    def __init__(
        self,
        max_z: int,
        embedding_dim: int,
        ffn_embedding_dim: int,
        num_layers: int,
        num_heads: int,
        cutoff: float,
        num_rbf: int,
        checkpoint_layers: bool = False,
    ) -> None:
        super().__init__()
        self.cutoff = cutoff
        self.checkpoint_layers = checkpoint_layers
        self.embedding = nn.Embedding(max_z, embedding_dim, padding_idx=0)
        self.distance_expansion = ExpNormalBasis(num_rbf, cutoff)
        self.dist_proj = nn.Linear(num_rbf, embedding_dim)
        self.act = nn.SiLU()
        self.layers = nn.ModuleList(
            GeoformerAttnBlock(
                embedding_dim, ffn_embedding_dim, num_heads, cutoff, k < num_layers - 1
            )
            for k in range(num_layers)
        )
        self.x_in_layernorm = nn.LayerNorm(embedding_dim)

    def forward(self, z: torch.Tensor, pos: torch.Tensor, atom_mask: torch.Tensor) -> torch.Tensor:
        """z [B, N], pos [B, N, 3], atom_mask [B, N] (False: padding) → x [B, N, F]."""
        n = z.shape[1]
        pair_mask = atom_mask.unsqueeze(1) & atom_mask.unsqueeze(2)
        diff = pos.unsqueeze(1) - pos.unsqueeze(2)  # [b, i, j] = r_j − r_i
        loop = torch.eye(n, dtype=torch.bool, device=z.device)
        # the norm of a stand-in vector on the diagonal, whose gradient would be NaN at 0
        dist = torch.linalg.vector_norm(diff.masked_fill(loop.unsqueeze(-1), 1.0), dim=-1)
        dist = dist.masked_fill(loop, 0.0)
        adjacent = (dist < self.cutoff) & pair_mask  # self-pairs included
        neighbours = adjacent & ~loop
        vec = (diff / (dist.unsqueeze(-1) + 1e-8)).masked_fill(  # upstream's 1e-8
            ~neighbours.unsqueeze(-1), 0.0
        )
        x = self.x_in_layernorm(self.embedding(z))
        edge_attr = self.act(self.dist_proj(self.distance_expansion(dist)))
        edge_attr = edge_attr.masked_fill(~adjacent.unsqueeze(-1), 0.0)
        blocked = ~adjacent
        for layer in self.layers:
            if self.checkpoint_layers and torch.is_grad_enabled():
                x, edge_attr = checkpoint(
                    layer, x, vec, dist, edge_attr, blocked, use_reentrant=False
                )
            else:
                x, edge_attr = layer(x, vec, dist, edge_attr, blocked)
        return x


class GeoformerScalarDecoder(nn.Module):
    """Upstream's per-atom `classifier` F → F/2 → 1 up to its last Linear (the shared
    head): Linear and SiLU."""

    def __init__(self, embedding_dim: int) -> None:
        super().__init__()
        self.classifier = nn.Sequential(nn.Linear(embedding_dim, embedding_dim // 2), nn.SiLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(x)


class Geoformer(nn.Module):
    """GeoFormer on point clouds: per-atom vectors and their molecule for the shared
    readout (see the module docstring). Upstream's QM9 sizes are the defaults;
    `checkpoint_layers` trades compute for memory in training."""

    def __init__(
        self,
        embedding_dim: int = 512,
        ffn_embedding_dim: int = 2048,
        num_layers: int = 12,
        num_heads: int = 32,
        cutoff: float = 5.0,
        num_rbf: int = 64,
        max_z: int = 100,
        checkpoint_layers: bool = False,
    ) -> None:
        super().__init__()
        self.max_z = max_z
        self.geo_encoder = GeoformerEncoder(
            max_z,
            embedding_dim,
            ffn_embedding_dim,
            num_layers,
            num_heads,
            cutoff,
            num_rbf,
            checkpoint_layers,
        )
        self.geo_decoder = GeoformerScalarDecoder(embedding_dim)
        self.out_dim = embedding_dim // 2
        xavier_init_linears(self)  # upstream's reset_parameters

    def forward(self, batch: PointCloudBatch) -> tuple[torch.Tensor, torch.Tensor]:
        z, molecule = batch.z, batch.molecule
        if len(z) and (int(z.min()) < 1 or int(z.max()) >= self.max_z):
            raise ValueError(
                f"atomic numbers must lie in [1, {self.max_z}) (0 marks padding); "
                f"got {int(z.min())}…{int(z.max())}"
            )
        n_molecules = len(batch)
        z_dense, atom_mask = to_dense_batch(z, molecule, 0, batch_size=n_molecules)
        pos_dense, _ = to_dense_batch(batch.pos, molecule, 0.0, batch_size=n_molecules)
        x = self.geo_encoder(z_dense, pos_dense, atom_mask)
        return self.geo_decoder(x[atom_mask]), molecule
