"""Shared checks for 3D models: tiny point-cloud batches and the symmetry transforms.

A 3D backbone reads a `PointCloudBatch` (`z` int64 [atoms], `pos` float32 [atoms, 3] in
Å, `molecule` of each atom, sorted) and returns per-atom vectors with their molecule
index, or one vector per molecule; `molecule_output` pools either into one vector per
molecule (mean), so a check can compare predictions molecule by molecule.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch
from torch import nn

from oodmol.data.batches import PointCloudBatch
from oodmol.data.features import GraphSet
from oodmol.data.featurize.base import MolInput
from oodmol.data.featurize.graph3d import Graph3D

SMILES = ["CC(=O)O", "C", "c1ccccc1O", "C/C=C/c1cc[nH+]cc1", "N#CC", "OCCN"]


def point_cloud_batch(smiles: list[str] = SMILES, seed: int = 0) -> PointCloudBatch:
    """ETKDG + MMFF conformers of `smiles` batched as the models read them (float32)."""
    clouds = [Graph3D(seed=seed)(MolInput(s)) for s in smiles]
    y = np.linspace(-1.0, 1.0, len(smiles))
    dataset = GraphSet(clouds, y, PointCloudBatch, atom_fields=("z", "pos"), edge_fields=())
    return dataset.__getitems__(list(range(len(smiles))))[0]


def random_rotation(seed: int, reflect: bool = False) -> torch.Tensor:
    """A random orthogonal 3×3 matrix (det +1, or −1 with `reflect`)."""
    g = torch.Generator().manual_seed(seed)
    q, r = torch.linalg.qr(torch.randn(3, 3, generator=g, dtype=torch.float64))
    q = q * torch.sign(torch.diagonal(r))
    if torch.det(q) < 0:
        q[:, 0] = -q[:, 0]
    if reflect:
        q = q @ torch.diag(torch.tensor([1.0, 1.0, -1.0], dtype=torch.float64))
    return q


def transformed(
    batch: PointCloudBatch, rotation: torch.Tensor, shift: torch.Tensor
) -> PointCloudBatch:
    """The batch with every position mapped to R·r + t (computed in float64)."""
    pos = batch.pos.double() @ rotation.T + shift
    return replace(batch, pos=pos.to(batch.pos.dtype))


def in_double(batch: PointCloudBatch) -> PointCloudBatch:
    return replace(batch, pos=batch.pos.double(), y=batch.y.double())


def permuted(batch: PointCloudBatch, seed: int) -> tuple[PointCloudBatch, torch.Tensor]:
    """The batch with the atoms of each molecule shuffled (molecules stay contiguous and
    in order); returns the batch and the permutation (new position → old atom)."""
    g = torch.Generator().manual_seed(seed)
    order = []
    for molecule in torch.unique(batch.molecule):
        atoms = torch.nonzero(batch.molecule == molecule).flatten()
        order.append(atoms[torch.randperm(len(atoms), generator=g)])
    perm = torch.cat(order)
    shuffled = replace(batch, z=batch.z[perm], pos=batch.pos[perm], molecule=batch.molecule[perm])
    return shuffled, perm


def molecule_output(model: nn.Module, batch: PointCloudBatch) -> torch.Tensor:
    """One vector per molecule from a backbone's output (per-atom outputs averaged)."""
    out = model(batch)
    if isinstance(out, tuple):
        h, segment = out
        n = len(batch)
        summed = h.new_zeros(n, h.shape[-1]).index_add_(0, segment, h)
        return summed / torch.bincount(segment, minlength=n).clamp(min=1).unsqueeze(-1)
    return out


def assert_invariant(
    model: nn.Module, batch: PointCloudBatch, reflect: bool, atol: float = 1e-5
) -> None:
    """The model's molecule outputs do not change under a random rotation (with a
    reflection if `reflect`), a translation, and a permutation of each molecule's atoms.

    Outputs are compared in float64 (the model is cast), so the tolerance measures the
    symmetry, not float32 rounding."""
    model = model.double().eval()
    batch = in_double(batch)
    with torch.no_grad():
        reference = molecule_output(model, batch)
        for seed in range(3):
            g = torch.Generator().manual_seed(seed)
            shift = torch.randn(3, generator=g, dtype=torch.float64)
            moved = transformed(batch, random_rotation(seed, reflect), 5.0 * shift)
            torch.testing.assert_close(molecule_output(model, moved), reference, atol=atol, rtol=0)
            shuffled, _ = permuted(batch, seed)
            torch.testing.assert_close(
                molecule_output(model, shuffled), reference, atol=atol, rtol=0
            )
