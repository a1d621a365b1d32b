"""PaiNN, the polarizable atom interaction neural network (Schütt, Unke & Gastegger,
"Equivariant message passing for the prediction of tensorial properties and molecular
spectra", ICML 2021), written from the paper with schnetpack's `representation/painn.py`
read for the details; this is our own code.

Every atom carries F scalar features s_i and F vector features v_i (each a 3-vector, so
v is [N, 3, F]), starting from an element embedding and zero vectors. Each of the
interaction blocks is a message step then an update step, both residual:

- message: for neighbours j within the cutoff, φ(s_j) (Linear → SiLU → Linear to 3F) is
  multiplied by a filter W(r_ij) (a Linear map of 20 radial basis functions
  sin(nπ r/r_c)/r, `BesselBasis`, times a cosine cutoff at r_c = 5 Å) and split in three,
  Δs_i = Σ_j a_ij, Δv_i = Σ_j b_ij ∘ v_j + c_ij ∘ r̂_ij;
- update: two bias-free channel mixes U v and V v; an MLP (Linear → SiLU → Linear) of
  [s ‖ |V v|] gives a_vv, a_sv, a_ss, and Δv = a_vv ∘ U v, Δs = a_sv ∘ ⟨U v, V v⟩ + a_ss.

Scalars depend on the geometry only through distances, norms and dot products of polar
vectors, so the output is invariant under rotations, reflections, translations and atom
permutations (O(3), not only SO(3)); the vectors rotate (and reflect) with the molecule.

Readout (`oodmol.models.output_modules`), two options:
- scalar properties (the default): the paper's per-atom MLP F → F/2 → 1 summed (or
  averaged) over the molecule (`ScalarOutput`): the backbone returns the F/2 hidden units
  after SiLU, the shared readout pools them (sum for extensive, mean for intensive tasks)
  and the shared head is the last Linear, so its bias is added once per molecule.
- `dipole=True`: the paper's dipole moment (eq. 13), |Σ_i q_i r_i + μ_i| from per-atom
  charges (made neutral) and atomic dipoles (`EquivariantDipoleOutput`), one value per
  molecule ([B, 1], `out_dim = 1`); the shared head is then an affine map of |μ| on
  standardised targets (it learns the scale from e·Å to the target's unit).
"""

from __future__ import annotations

import torch
from torch import nn

from oodmol.data.batches import PointCloudBatch
from oodmol.models.blocks import (
    BesselBasis,
    CosineCutoff,
    vector_norm,
    xavier_init_linears,
)
from oodmol.models.output_modules import (
    EquivariantDipoleOutput,
    MessagePassingBackbone,
    ScalarOutput,
)


class Message(nn.Module):
    """The message step: continuous-filter convolution of φ(s_j) and of v_j, plus a new
    vector along the bond direction."""

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
        filters: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
        direction: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`filters`: the three [E, F] parts of W(r_ij) f_cut(r_ij). Edge-wise work is
        memory-bound on CPU, so each [E, 3, F] tensor is made once and no [E, 3F] one is
        split: φ(s)'s three parts are gathered apart, the v_j term is fused into the
        direction term (`addcmul`), and the sums over sources are accumulated onto the
        residual (`index_add`, edges sorted by target)."""
        j, i = edge_index
        a, b, c = (
            x.index_select(0, j) * w
            for x, w in zip(torch.split(self.phi(s), self.hidden, dim=-1), filters, strict=True)
        )
        dv = torch.addcmul(
            c.unsqueeze(1) * direction.unsqueeze(-1), b.unsqueeze(1), v.index_select(0, j)
        )
        # onto the residual in its dtype (float32 under bf16 autocast)
        return s.index_add(0, i, a.to(s.dtype)), v.index_add(0, i, dv.to(v.dtype))


class Update(nn.Module):
    """The update step: atom-wise coupling of the scalar and vector channels."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.hidden = hidden
        self.mix = nn.Linear(hidden, 2 * hidden, bias=False)  # U and V
        self.net = nn.Sequential(
            nn.Linear(2 * hidden, hidden), nn.SiLU(), nn.Linear(hidden, 3 * hidden)
        )

    def forward(self, s: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        uv, vv = torch.split(self.mix(v), self.hidden, dim=-1)
        a_vv, a_sv, a_ss = torch.split(
            self.net(torch.cat([s, vector_norm(vv)], dim=-1)), self.hidden, dim=-1
        )
        return s + a_sv * (uv * vv).sum(1) + a_ss, v + a_vv.unsqueeze(1) * uv


class PaiNN(MessagePassingBackbone):
    """PaiNN on point clouds (`z`, `pos`, `molecule`); per-atom vectors for the shared
    readout, or |μ| per molecule with `dipole=True` (see the module docstring).

    `max_neighbors` caps each atom's neighbour list (the nearest are kept); schnetpack
    uses every pair within the cutoff, and the default is far above the number of atoms
    within 5 Å in organic molecules, so the cap does not bind there.
    """

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
        super().__init__(hidden, cutoff, max_neighbors)
        self.embedding = nn.Embedding(max_z, hidden)
        self.rbf = BesselBasis(num_rbf, cutoff)
        self.cutoff_fn = CosineCutoff(cutoff)
        # one filter network per block, computed in one matrix product (as schnetpack)
        self.filters = nn.Linear(num_rbf, layers * 3 * hidden)
        self.messages = nn.ModuleList(Message(hidden) for _ in range(layers))
        self.updates = nn.ModuleList(Update(hidden) for _ in range(layers))
        self.output = EquivariantDipoleOutput(hidden) if dipole else ScalarOutput(hidden)
        xavier_init_linears(self)  # schnetpack's Dense initialisation

    def embed(self, batch: PointCloudBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """Scalar [N, F] and vector [N, 3, F] atom features after the interaction blocks."""
        edges = self.distance(batch.pos, batch.molecule)
        r = edges.length
        # W(r) f_cut(r) = [rbf(r) f_cut(r) ‖ f_cut(r)] · [W ‖ b]ᵀ: the cutoff enters the
        # K + 1 basis columns instead of the 3F-wide filters, each part contiguous [E, F]
        cut = self.cutoff_fn(r).unsqueeze(-1)
        basis = torch.cat([self.rbf(r) * cut, cut], dim=-1)
        weights = torch.cat([self.filters.weight, self.filters.bias.unsqueeze(-1)], dim=-1)
        parts = [basis @ w.T for w in torch.split(weights, self.hidden)]
        filters = [parts[k : k + 3] for k in range(0, len(parts), 3)]
        s = self.embedding(batch.z)
        v = s.new_zeros(s.shape[0], 3, self.hidden)
        for message, update, w in zip(self.messages, self.updates, filters, strict=True):
            s, v = message(s, v, edges.index, w, edges.direction)
            s, v = update(s, v)
        return s, v


def schnetpack_state_dict(backbone: PaiNN) -> dict[str, torch.Tensor]:
    """Our backbone's weights under schnetpack's names and layouts (its
    `representation.PaiNN`, 2.1.1): the same numbers with the 3F-wide outputs and the
    channel mix in schnetpack's order. Our message splits into (scalar, v_j, direction)
    parts where schnetpack's splits into (scalar, direction, v_j); our update's mix gives
    (U v, V v) where schnetpack's gives (V v, U v), the norm's first; and our update MLP's
    (a_vv, a_sv, a_ss) are schnetpack's (a_ss, a_vv, a_sv). The output head is not part of
    it."""

    def order(tensor: torch.Tensor, parts: list[int]) -> torch.Tensor:
        """The F-row blocks of `tensor` in the order `parts`, group by group (the filter
        network stacks one group per interaction block)."""
        blocks, size = torch.split(tensor, backbone.hidden), len(parts)
        return torch.cat([blocks[g + p] for g in range(0, len(blocks), size) for p in parts])

    message = [0, 2, 1]  # ours (a, b: v_j, c: direction) → schnetpack (a, direction, v_j)
    state = {
        "embedding.weight": backbone.embedding.weight,
        "filter_net.weight": order(backbone.filters.weight, message),
        "filter_net.bias": order(backbone.filters.bias, message),
    }
    for k, (msg, upd) in enumerate(zip(backbone.messages, backbone.updates, strict=True)):
        context = f"interactions.{k}.interatomic_context_net"
        mixing = f"mixing.{k}"
        state |= {
            f"{context}.0.weight": msg.phi[0].weight,
            f"{context}.0.bias": msg.phi[0].bias,
            f"{context}.1.weight": order(msg.phi[2].weight, message),
            f"{context}.1.bias": order(msg.phi[2].bias, message),
            f"{mixing}.mu_channel_mix.weight": order(upd.mix.weight, [1, 0]),
            f"{mixing}.intraatomic_context_net.0.weight": upd.net[0].weight,
            f"{mixing}.intraatomic_context_net.0.bias": upd.net[0].bias,
            f"{mixing}.intraatomic_context_net.1.weight": order(upd.net[2].weight, [2, 0, 1]),
            f"{mixing}.intraatomic_context_net.1.bias": order(upd.net[2].bias, [2, 0, 1]),
        }
    return {key: value.detach().clone() for key, value in state.items()}
