"""PaiNN and the Equivariant Transformer as they were before the shared 3D building blocks
(`oodmol.models.blocks`, `oodmol.models.output_modules`): a frozen copy of
`backbones/painn.py`, `backbones/et.py` and `models/dipole.py` at commit dcd1fed, kept as
the reference that the rewritten models must reproduce (`test_painn_et_equivalence.py`)
and as the baseline of speed comparisons. Not to be edited: change the models, not this.

Only the neighbour search is shared with the live code (`oodmol.models.neighbors`); its
own tests compare it with a brute-force search.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch_geometric.utils import scatter

from oodmol.data.batches import PointCloudBatch
from oodmol.models.neighbors import radius_graph

EPS = 1e-8


def vector_norm(v: torch.Tensor, dim: int = 1) -> torch.Tensor:
    return torch.sqrt(v.pow(2).sum(dim) + EPS)


class GatedEquivariantBlock(nn.Module):
    def __init__(
        self, in_dim: int, out_dim: int, hidden: int, scalar_activation: bool = False
    ) -> None:
        super().__init__()
        self.out_dim = out_dim
        self.vector_mix = nn.Linear(in_dim, 2 * out_dim, bias=False)
        self.net = nn.Sequential(
            nn.Linear(in_dim + out_dim, hidden), nn.SiLU(), nn.Linear(hidden, 2 * out_dim)
        )
        self.scalar_activation = nn.SiLU() if scalar_activation else nn.Identity()

    def forward(self, s: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        v_v, v_w = torch.split(self.vector_mix(v), self.out_dim, dim=-1)
        s, gate = torch.split(self.net(torch.cat([s, vector_norm(v_v)], dim=-1)), self.out_dim, -1)
        return self.scalar_activation(s), gate.unsqueeze(1) * v_w


def dipole_vector(
    charges: torch.Tensor,
    pos: torch.Tensor,
    segment: torch.Tensor,
    n_molecules: int,
    atomic_dipoles: torch.Tensor | None = None,
) -> torch.Tensor:
    mean_charge = scatter(charges, segment, dim=0, dim_size=n_molecules, reduce="mean")
    per_atom = (charges - mean_charge[segment]).unsqueeze(-1) * pos
    if atomic_dipoles is not None:
        per_atom = per_atom + atomic_dipoles
    return scatter(per_atom, segment, dim=0, dim_size=n_molecules, reduce="sum")


class DipoleReadout(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            [
                GatedEquivariantBlock(hidden, hidden // 2, hidden, scalar_activation=True),
                GatedEquivariantBlock(hidden // 2, 1, hidden // 2),
            ]
        )

    def vector(
        self,
        s: torch.Tensor,
        v: torch.Tensor,
        pos: torch.Tensor,
        segment: torch.Tensor,
        n_molecules: int,
    ) -> torch.Tensor:
        for block in self.blocks:
            s, v = block(s, v)
        return dipole_vector(s.squeeze(-1), pos, segment, n_molecules, v.squeeze(-1))

    def forward(
        self,
        s: torch.Tensor,
        v: torch.Tensor,
        pos: torch.Tensor,
        segment: torch.Tensor,
        n_molecules: int,
    ) -> torch.Tensor:
        mu = self.vector(s, v, pos, segment, n_molecules)
        return torch.linalg.vector_norm(mu, dim=-1, keepdim=True)


# --- backbones/painn.py ---------------------------------------------------------------


def cosine_cutoff(r: torch.Tensor, cutoff: float) -> torch.Tensor:
    return 0.5 * (torch.cos(r * math.pi / cutoff) + 1.0) * (r < cutoff).to(r.dtype)


class SineBasis(nn.Module):
    def __init__(self, num_rbf: int, cutoff: float) -> None:
        super().__init__()
        self.register_buffer("frequencies", torch.arange(1, num_rbf + 1) * math.pi / cutoff)

    def forward(self, r: torch.Tensor) -> torch.Tensor:
        return torch.sin(r.unsqueeze(-1) * self.frequencies) / r.unsqueeze(-1)


class Message(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.hidden = hidden
        self.phi = nn.Sequential(
            nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, 3 * hidden)
        )

    def forward(
        self,
        s: torch.Tensor,
        v: torch.Tensor,
        edge_index: torch.Tensor,
        filters: torch.Tensor,
        direction: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        j, i = edge_index
        a, b, c = torch.split(self.phi(s)[j] * filters, self.hidden, dim=-1)
        dv = b.unsqueeze(1) * v[j] + c.unsqueeze(1) * direction.unsqueeze(-1)
        n = s.shape[0]
        ds = scatter(a, i, dim=0, dim_size=n, reduce="sum")
        return s + ds, v + scatter(dv, i, dim=0, dim_size=n, reduce="sum")


class Update(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.hidden = hidden
        self.mix = nn.Linear(hidden, 2 * hidden, bias=False)
        self.net = nn.Sequential(
            nn.Linear(2 * hidden, hidden), nn.SiLU(), nn.Linear(hidden, 3 * hidden)
        )

    def forward(self, s: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        uv, vv = torch.split(self.mix(v), self.hidden, dim=-1)
        a_vv, a_sv, a_ss = torch.split(
            self.net(torch.cat([s, vector_norm(vv)], dim=-1)), self.hidden, dim=-1
        )
        return s + a_sv * (uv * vv).sum(1) + a_ss, v + a_vv.unsqueeze(1) * uv


class PaiNN(nn.Module):
    def __init__(
        self,
        hidden: int = 128,
        layers: int = 3,
        num_rbf: int = 20,
        cutoff: float = 5.0,
        max_neighbors: int = 128,
        max_z: int = 100,
        dipole: bool = False,
    ) -> None:
        super().__init__()
        self.hidden = hidden
        self.cutoff = cutoff
        self.max_neighbors = max_neighbors
        self.embedding = nn.Embedding(max_z, hidden)
        self.rbf = SineBasis(num_rbf, cutoff)
        self.filters = nn.Linear(num_rbf, layers * 3 * hidden)
        self.messages = nn.ModuleList(Message(hidden) for _ in range(layers))
        self.updates = nn.ModuleList(Update(hidden) for _ in range(layers))
        if dipole:
            self.dipole = DipoleReadout(hidden)
            self.out_dim = 1
        else:
            self.dipole = None
            self.output = nn.Sequential(nn.Linear(hidden, hidden // 2), nn.SiLU())
            self.out_dim = hidden // 2
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    def embed(self, batch: PointCloudBatch) -> tuple[torch.Tensor, torch.Tensor]:
        z, pos = batch.z, batch.pos
        edge_index = radius_graph(pos, batch.molecule, self.cutoff, self.max_neighbors)
        j, i = edge_index
        offset = pos[j] - pos[i]
        r = torch.linalg.vector_norm(offset, dim=-1)
        filters = self.filters(self.rbf(r)) * cosine_cutoff(r, self.cutoff).unsqueeze(-1)
        filters = torch.split(filters, 3 * self.hidden, dim=-1)
        direction = offset / r.unsqueeze(-1)
        s = self.embedding(z)
        v = s.new_zeros(s.shape[0], 3, self.hidden)
        for message, update, w in zip(self.messages, self.updates, filters, strict=True):
            s, v = message(s, v, edge_index, w, direction)
            s, v = update(s, v)
        return s, v

    def dipole_vector(self, batch: PointCloudBatch) -> torch.Tensor:
        s, v = self.embed(batch)
        return self.dipole.vector(s, v, batch.pos, batch.molecule, len(batch))

    def forward(self, batch: PointCloudBatch) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        s, v = self.embed(batch)
        if self.dipole is not None:
            return self.dipole(s, v, batch.pos, batch.molecule, len(batch))
        return self.output(s), batch.molecule


# --- backbones/et.py ------------------------------------------------------------------


class ExpNormalBasis(nn.Module):
    def __init__(self, num_rbf: int, cutoff: float, trainable: bool = False) -> None:
        super().__init__()
        self.cutoff = cutoff
        self.alpha = 5.0 / cutoff
        start = math.exp(-cutoff)
        means = torch.linspace(start, 1.0, num_rbf)
        betas = torch.full((num_rbf,), (2.0 / num_rbf * (1.0 - start)) ** -2)
        if trainable:
            self.means, self.betas = nn.Parameter(means), nn.Parameter(betas)
        else:
            self.register_buffer("means", means)
            self.register_buffer("betas", betas)

    def forward(self, r: torch.Tensor) -> torch.Tensor:
        r = r.unsqueeze(-1)
        smooth = cosine_cutoff(r, self.cutoff)
        return smooth * torch.exp(-self.betas * (torch.exp(-self.alpha * r) - self.means) ** 2)


class NeighborEmbedding(nn.Module):
    def __init__(self, hidden: int, num_rbf: int, cutoff: float, max_z: int) -> None:
        super().__init__()
        self.cutoff = cutoff
        self.embedding = nn.Embedding(max_z, hidden)
        self.distance_proj = nn.Linear(num_rbf, hidden)
        self.combine = nn.Linear(2 * hidden, hidden)

    def forward(
        self,
        z: torch.Tensor,
        x: torch.Tensor,
        edge_index: torch.Tensor,
        r: torch.Tensor,
        rbf: torch.Tensor,
    ) -> torch.Tensor:
        j, i = edge_index
        w = self.distance_proj(rbf) * cosine_cutoff(r, self.cutoff).unsqueeze(-1)
        neighbours = scatter(w * self.embedding(z)[j], i, dim=0, dim_size=x.shape[0])
        return self.combine(torch.cat([x, neighbours], dim=-1))


class EquivariantAttention(nn.Module):
    def __init__(self, hidden: int, num_rbf: int, heads: int, cutoff: float) -> None:
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden ({hidden}) must be a multiple of heads ({heads})")
        self.hidden, self.heads, self.head_dim = hidden, heads, hidden // heads
        self.cutoff = cutoff
        self.layernorm = nn.LayerNorm(hidden)
        self.q_proj = nn.Linear(hidden, hidden)
        self.k_proj = nn.Linear(hidden, hidden)
        self.v_proj = nn.Linear(hidden, 3 * hidden)
        self.o_proj = nn.Linear(hidden, 3 * hidden)
        self.vec_proj = nn.Linear(hidden, 3 * hidden, bias=False)
        self.dk_proj = nn.Linear(num_rbf, hidden)
        self.dv_proj = nn.Linear(num_rbf, 3 * hidden)
        self.act = nn.SiLU()

    def forward(
        self,
        x: torch.Tensor,
        vec: torch.Tensor,
        edge_index: torch.Tensor,
        r: torch.Tensor,
        rbf: torch.Tensor,
        direction: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        n, e = x.shape[0], r.shape[0]
        heads, d = self.heads, self.head_dim
        j, i = edge_index
        x = self.layernorm(x)
        q = self.q_proj(x).view(n, heads, d)
        k = self.k_proj(x).view(n, heads, d)
        v = self.v_proj(x).view(n, heads, 3 * d)
        vec1, vec2, vec3 = torch.split(self.vec_proj(vec), self.hidden, dim=-1)
        dk = self.act(self.dk_proj(rbf)).view(e, heads, d)
        dv = self.act(self.dv_proj(rbf)).view(e, heads, 3 * d)

        attention = self.act((q[i] * k[j] * dk).sum(-1)) * cosine_cutoff(r, self.cutoff)[:, None]
        values, gate, along = torch.split(v[j] * dv, d, dim=-1)
        messages = values * attention.unsqueeze(-1)
        vec_messages = vec.view(n, 3, heads, d)[j] * gate.unsqueeze(1) + along.unsqueeze(
            1
        ) * direction.view(e, 3, 1, 1)
        y = scatter(messages, i, dim=0, dim_size=n).view(n, self.hidden)
        w = scatter(vec_messages, i, dim=0, dim_size=n).view(n, 3, self.hidden)

        o1, o2, o3 = torch.split(self.o_proj(y), self.hidden, dim=-1)
        dx = (vec1 * vec2).sum(1) * o2 + o3
        dvec = vec3 * o1.unsqueeze(1) + w
        return dx, dvec


class EquivariantTransformer(nn.Module):
    def __init__(
        self,
        hidden: int = 256,
        layers: int = 8,
        heads: int = 8,
        num_rbf: int = 64,
        cutoff: float = 5.0,
        max_neighbors: int = 96,
        max_z: int = 100,
        trainable_rbf: bool = False,
        neighbor_embedding: bool = True,
        dipole: bool = False,
    ) -> None:
        super().__init__()
        self.hidden = hidden
        self.cutoff = cutoff
        self.max_neighbors = max_neighbors
        self.embedding = nn.Embedding(max_z, hidden)
        self.rbf = ExpNormalBasis(num_rbf, cutoff, trainable_rbf)
        self.neighbor_embedding = (
            NeighborEmbedding(hidden, num_rbf, cutoff, max_z) if neighbor_embedding else None
        )
        self.layers = nn.ModuleList(
            EquivariantAttention(hidden, num_rbf, heads, cutoff) for _ in range(layers)
        )
        self.out_norm = nn.LayerNorm(hidden)
        if dipole:
            self.dipole = DipoleReadout(hidden)
            self.out_dim = 1
        else:
            self.dipole = None
            self.output = nn.Sequential(nn.Linear(hidden, hidden // 2), nn.SiLU())
            self.out_dim = hidden // 2
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    def embed(self, batch: PointCloudBatch) -> tuple[torch.Tensor, torch.Tensor]:
        z, pos = batch.z, batch.pos
        n = z.shape[0]
        edge_index = radius_graph(pos, batch.molecule, self.cutoff, self.max_neighbors)
        j, i = edge_index
        offset = pos[j] - pos[i]
        r = torch.linalg.vector_norm(offset, dim=-1)
        direction = offset / r.unsqueeze(-1)
        rbf = self.rbf(r)
        x = self.embedding(z)
        if self.neighbor_embedding is not None:
            x = self.neighbor_embedding(z, x, edge_index, r, rbf)
        loops = torch.arange(n, device=z.device)
        edge_index = torch.cat([edge_index, torch.stack([loops, loops])], dim=1)
        r = torch.cat([r, r.new_zeros(n)])
        rbf = torch.cat([rbf, self.rbf(r.new_zeros(n))])
        direction = torch.cat([direction, direction.new_zeros(n, 3)])
        vec = x.new_zeros(n, 3, self.hidden)
        for layer in self.layers:
            dx, dvec = layer(x, vec, edge_index, r, rbf, direction)
            x, vec = x + dx, vec + dvec
        return self.out_norm(x), vec

    def dipole_vector(self, batch: PointCloudBatch) -> torch.Tensor:
        x, vec = self.embed(batch)
        return self.dipole.vector(x, vec, batch.pos, batch.molecule, len(batch))

    def forward(self, batch: PointCloudBatch) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        x, vec = self.embed(batch)
        if self.dipole is not None:
            return self.dipole(x, vec, batch.pos, batch.molecule, len(batch))
        return self.output(x), batch.molecule
