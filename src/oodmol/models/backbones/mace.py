"""MACE, higher-order equivariant message passing (Batatia, Kovács, Simm, Ortner & Csányi,
"MACE: Higher Order Equivariant Message Passing Neural Networks for Fast and Accurate
Force Fields", NeurIPS 2022), written on e3nn with mace-torch 0.3.16's
`modules/models.py` and `modules/blocks.py` read for the details; this is our own code.

The model `mace_run_train --model MACE` builds (BOOM's), per layer t:

- atomic basis: A_i = Σ_j R(r_ij) ⊗ Y(r̂_ij) ⊗ W h_j / avg_num_neighbors, a tensor product
  ("uvu") of the atom features with the spherical harmonics Y_l (l ≤ max_ell) of the bond,
  its weights an MLP of 8 Bessel functions times a polynomial cutoff (p = 5), then a
  linear map to the interaction irreps (every l ≤ max_ell, both parities as Y gives them);
- product basis (`oodmol.models.blocks.product_basis`): symmetric products of A_i up to
  `correlation`, with weights per element, then a linear map to the hidden irreps
  (256x0e+256x1o+256x2e for max_L 2; scalars only after the last layer);
- element-dependent skip connections (e3nn's FullyConnectedTensorProduct with the
  one-hot element): applied to the message in the first layer ("RealAgnosticInteraction"),
  added to the product basis from the features before it in the later ones
  ("RealAgnosticResidualInteraction");
- readout: a linear map to one energy per atom after every layer but the last, an MLP
  (16x0e, SiLU) after the last (linear too if there is only one), summed over the layers.

The backbone returns those per-atom energies ([N, 1]) and each atom's molecule; the
task's readout pools them (a sum in BOOM, where every property is treated as an energy:
`model.module.extensive=true`) and the shared head's Linear(1, 1) is ScaleShiftMACE's
scale and shift. The per-element offsets E0 are the regressor's atom-reference prior
(`model.statistics` → `atom_reference`), fitted on the training molecules only.

Parameter names are mace-torch's (the module tree mirrors `ScaleShiftMACE`), so a
mace-torch state dict loads with `load_state_dict(..., strict=False)`; its buffers
(atomic energies, scale and shift, coupling matrices, element list) are rebuilt here.
Two inputs differ by design: the one-hot element encoding covers the training set's
elements (`atomic_numbers`, as mace's z-table) and an element outside it gets a zero row
(mace refuses it), and mace's bond vectors r_i − r_j are our −`Edges.vector`.

Predictions are invariant under rotations, reflections, translations and permutations;
the l = 1, 2 features of the first layer transform with e3nn's Wigner D matrices
(`node_features`).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from e3nn import nn as e3nn_nn
from e3nn import o3
from torch import nn
from torch_geometric.utils import scatter

from oodmol.data.batches import PointCloudBatch
from oodmol.models.blocks import BesselBasis, Distance, PolynomialCutoff
from oodmol.models.blocks.product_basis import SymmetricContraction


def interaction_tp(
    irreps_in: o3.Irreps, irreps_edge: o3.Irreps, target: o3.Irreps
) -> tuple[o3.Irreps, list[tuple]]:
    """The "uvu" paths of `irreps_in ⊗ irreps_edge` whose irrep is in `target`, their
    outputs sorted by irrep (nequip's and mace's `tp_out_irreps_with_instructions`)."""
    outputs, instructions = [], []
    for i, (mul, ir_in) in enumerate(irreps_in):
        for j, (_, ir_edge) in enumerate(irreps_edge):
            for ir_out in ir_in * ir_edge:
                if ir_out in target:
                    instructions.append((i, j, len(outputs), "uvu", True))
                    outputs.append((mul, ir_out))
    irreps_mid, permutation, _ = o3.Irreps(outputs).sort()
    instructions = sorted(
        ((i, j, permutation[k], mode, train) for i, j, k, mode, train in instructions),
        key=lambda instruction: instruction[2],
    )
    return irreps_mid, instructions


def to_channels(x: torch.Tensor, irreps: o3.Irreps) -> torch.Tensor:
    """e3nn's flat layout [N, Σ mul·(2l+1)] as [N, mul, Σ (2l+1)] (equal multiplicities)."""
    fields = [
        x[:, s].reshape(x.shape[0], mul, ir.dim)
        for (mul, ir), s in zip(irreps, irreps.slices(), strict=True)
    ]
    return torch.cat(fields, dim=-1)


class LinearNodeEmbeddingBlock(nn.Module):
    """The first atom features: a linear map of the one-hot element."""

    def __init__(self, irreps_in: o3.Irreps, irreps_out: o3.Irreps) -> None:
        super().__init__()
        self.linear = o3.Linear(irreps_in, irreps_out)

    def forward(self, node_attrs: torch.Tensor) -> torch.Tensor:
        return self.linear(node_attrs)


class RadialEmbeddingBlock(nn.Module):
    """Bessel functions √(2/r_c) sin(nπr/r_c)/r times the polynomial cutoff."""

    def __init__(self, r_max: float, num_bessel: int, num_polynomial_cutoff: int) -> None:
        super().__init__()
        self.bessel_fn = BesselBasis(num_bessel, r_max, normalize=True)
        self.cutoff_fn = PolynomialCutoff(r_max, num_polynomial_cutoff)
        self.out_dim = num_bessel

    def forward(self, r: torch.Tensor) -> torch.Tensor:
        return self.bessel_fn(r) * self.cutoff_fn(r).unsqueeze(-1)


class InteractionBlock(nn.Module):
    """The atomic basis A_i of one layer; `residual` chooses where the element-dependent
    skip connection goes (see the module docstring). Returns A [N, channels, dim] and
    the skip term for the product basis (None without `residual`)."""

    def __init__(
        self,
        node_attrs_irreps: o3.Irreps,
        node_feats_irreps: o3.Irreps,
        edge_attrs_irreps: o3.Irreps,
        num_radial: int,
        target_irreps: o3.Irreps,
        hidden_irreps: o3.Irreps,
        avg_num_neighbors: float,
        radial_mlp: list[int],
        residual: bool,
    ) -> None:
        super().__init__()
        self.residual = residual
        self.avg_num_neighbors = avg_num_neighbors
        self.target_irreps = target_irreps
        self.linear_up = o3.Linear(node_feats_irreps, node_feats_irreps)
        irreps_mid, instructions = interaction_tp(
            node_feats_irreps, edge_attrs_irreps, target_irreps
        )
        self.conv_tp = o3.TensorProduct(
            node_feats_irreps,
            edge_attrs_irreps,
            irreps_mid,
            instructions=instructions,
            shared_weights=False,
            internal_weights=False,
        )
        self.conv_tp_weights = e3nn_nn.FullyConnectedNet(
            [num_radial, *radial_mlp, self.conv_tp.weight_numel], nn.functional.silu
        )
        self.linear = o3.Linear(irreps_mid, target_irreps)
        if residual:
            self.skip_tp = o3.FullyConnectedTensorProduct(
                node_feats_irreps, node_attrs_irreps, hidden_irreps
            )
        else:
            self.skip_tp = o3.FullyConnectedTensorProduct(
                target_irreps, node_attrs_irreps, target_irreps
            )

    def forward(
        self,
        node_attrs: torch.Tensor,
        node_feats: torch.Tensor,
        edge_attrs: torch.Tensor,
        edge_feats: torch.Tensor,
        edge_index: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        sc = self.skip_tp(node_feats, node_attrs) if self.residual else None
        sender, receiver = edge_index
        h = self.linear_up(node_feats)
        messages = self.conv_tp(h[sender], edge_attrs, self.conv_tp_weights(edge_feats))
        message = scatter(messages, receiver, dim=0, dim_size=h.shape[0], reduce="sum")
        message = self.linear(message) / self.avg_num_neighbors
        if not self.residual:
            message = self.skip_tp(message, node_attrs)
        return to_channels(message, self.target_irreps), sc


class EquivariantProductBasisBlock(nn.Module):
    """Symmetric products of the atomic basis, a linear map, plus the skip term."""

    def __init__(
        self,
        node_feats_irreps: o3.Irreps,
        target_irreps: o3.Irreps,
        correlation: int,
        num_elements: int,
    ) -> None:
        super().__init__()
        self.symmetric_contractions = SymmetricContraction(
            node_feats_irreps, target_irreps, correlation, num_elements
        )
        self.linear = o3.Linear(target_irreps, target_irreps)

    def forward(
        self, node_feats: torch.Tensor, sc: torch.Tensor | None, node_attrs: torch.Tensor
    ) -> torch.Tensor:
        out = self.linear(self.symmetric_contractions(node_feats, node_attrs))
        return out if sc is None else out + sc


class LinearReadoutBlock(nn.Module):
    def __init__(self, irreps_in: o3.Irreps) -> None:
        super().__init__()
        self.linear = o3.Linear(irreps_in, o3.Irreps("0e"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


class NonLinearReadoutBlock(nn.Module):
    """Linear → gate (SiLU, normalised to the second moment by e3nn) → Linear."""

    def __init__(self, irreps_in: o3.Irreps, mlp_irreps: o3.Irreps) -> None:
        super().__init__()
        self.linear_1 = o3.Linear(irreps_in, mlp_irreps)
        self.non_linearity = e3nn_nn.Activation(mlp_irreps, [nn.functional.silu])
        self.linear_2 = o3.Linear(mlp_irreps, o3.Irreps("0e"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(self.non_linearity(self.linear_1(x)))


class MACE(nn.Module):
    """MACE on point clouds (`z`, `pos`, `molecule`): per-atom energies [N, 1] and each
    atom's molecule for the shared readout (see the module docstring).

    `atomic_numbers` are the elements of the one-hot encoding (the training set's,
    `ElementsPresent`); `avg_num_neighbors` normalises the messages (`AverageNeighbours`
    at `r_max`). `num_channels` and `max_L` give the hidden irreps
    (num_channels x 0e + num_channels x 1o + …, parities alternating, up to max_L).
    """

    def __init__(
        self,
        atomic_numbers: list[int],
        avg_num_neighbors: float,
        r_max: float = 5.0,
        num_bessel: int = 8,
        num_polynomial_cutoff: int = 5,
        max_ell: int = 3,
        num_interactions: int = 2,
        num_channels: int = 256,
        max_L: int = 2,
        correlation: int = 2,
        radial_mlp: Sequence[int] = (64, 64, 64),
        mlp_irreps: str = "16x0e",
        max_z: int = 119,
    ) -> None:
        super().__init__()
        if num_interactions < 1:
            raise ValueError(f"num_interactions must be at least 1, not {num_interactions}")
        if not atomic_numbers:
            raise ValueError("atomic_numbers is empty: the training set has no elements")
        if max(atomic_numbers) >= max_z or min(atomic_numbers) < 1:
            raise ValueError(f"atomic numbers must lie in 1 … {max_z - 1}: {atomic_numbers}")
        hidden_irreps = o3.Irreps([(num_channels, (ell, (-1) ** ell)) for ell in range(max_L + 1)])
        column = torch.full((max_z,), -1, dtype=torch.long)
        column[torch.as_tensor(sorted(atomic_numbers))] = torch.arange(len(atomic_numbers))
        self.register_buffer("element_column", column, persistent=False)
        self.num_elements = len(atomic_numbers)
        self.r_max = r_max
        self.distance = Distance(r_max, max_neighbors=None)

        node_attr_irreps = o3.Irreps([(self.num_elements, (0, 1))])
        scalars = o3.Irreps([(num_channels, (0, 1))])
        self.node_embedding = LinearNodeEmbeddingBlock(node_attr_irreps, scalars)
        self.radial_embedding = RadialEmbeddingBlock(r_max, num_bessel, num_polynomial_cutoff)
        sh_irreps = o3.Irreps.spherical_harmonics(max_ell)
        self.spherical_harmonics = o3.SphericalHarmonics(
            sh_irreps, normalize=True, normalization="component"
        )
        interaction_irreps = (sh_irreps * num_channels).sort()[0].simplify()

        self.interactions = nn.ModuleList()
        self.products = nn.ModuleList()
        self.readouts = nn.ModuleList()
        self.hidden_irreps = []
        node_feats_irreps = scalars
        for t in range(num_interactions):
            last = t == num_interactions - 1
            hidden_out = scalars if last else hidden_irreps
            self.interactions.append(
                InteractionBlock(
                    node_attr_irreps,
                    node_feats_irreps,
                    sh_irreps,
                    num_bessel,
                    interaction_irreps,
                    hidden_out,
                    avg_num_neighbors,
                    list(radial_mlp),
                    residual=t > 0,
                )
            )
            self.products.append(
                EquivariantProductBasisBlock(
                    interaction_irreps, hidden_out, correlation, self.num_elements
                )
            )
            self.readouts.append(
                NonLinearReadoutBlock(hidden_out, o3.Irreps(mlp_irreps))
                if last and t > 0  # mace: a single layer reads out linearly
                else LinearReadoutBlock(hidden_out)
            )
            self.hidden_irreps.append(hidden_out)
            node_feats_irreps = hidden_out
        # A copy of an e3nn tensor product (code generated by torch.fx) holds constants as
        # buffers that its original keeps elsewhere; weight averaging (EMA) pairs a model's
        # buffers with its copy's in order, so the model takes the copy's layout from the start.
        self.interactions = copy.deepcopy(self.interactions)
        self.out_dim = 1

    def one_hot(self, z: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """[N, elements]: the training elements' one-hot rows; zeros for any other."""
        column = self.element_column[z.long()]
        attrs = torch.zeros(len(z), self.num_elements + 1, dtype=dtype, device=z.device)
        attrs[torch.arange(len(z), device=z.device), column] = 1.0  # −1: the spare column
        return attrs[:, : self.num_elements]

    def node_features(self, batch: PointCloudBatch) -> list[torch.Tensor]:
        """Each layer's atom features [N, irreps] (e3nn layout, `hidden_irreps[t]`)."""
        pos = batch.pos
        edges = self.distance(pos, batch.molecule)
        node_attrs = self.one_hot(batch.z, pos.dtype)
        node_feats = self.node_embedding(node_attrs)
        edge_attrs = self.spherical_harmonics(-edges.vector)  # mace's r_i − r_j
        edge_feats = self.radial_embedding(edges.length)
        features = []
        for interaction, product in zip(self.interactions, self.products, strict=True):
            basis, sc = interaction(node_attrs, node_feats, edge_attrs, edge_feats, edges.index)
            node_feats = product(basis, sc, node_attrs)
            features.append(node_feats)
        return features

    def forward(self, batch: PointCloudBatch) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.node_features(batch)
        energies = sum(readout(h) for readout, h in zip(self.readouts, features, strict=True))
        return energies, batch.molecule
