"""Shared checks for 3D models: tiny point-cloud batches and the symmetry transforms.

A 3D backbone reads a batch dict with `z` (int64 [atoms]), `pos` (float32 [atoms, 3],
Å), `batch` (molecule of each atom, sorted) and `y`, and returns per-atom vectors with
their molecule index, or one vector per molecule; `molecule_output` pools either into
one vector per molecule (mean), so a check can compare predictions molecule by molecule.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from oodmol.data.features import GraphSet
from oodmol.data.featurize.base import MolInput
from oodmol.data.featurize.graph3d import Graph3D

SMILES = ["CC(=O)O", "C", "c1ccccc1O", "C/C=C/c1cc[nH+]cc1", "N#CC", "OCCN"]


def point_cloud_batch(smiles: list[str] = SMILES, seed: int = 0) -> dict:
    """ETKDG + MMFF conformers of `smiles` batched as the models read them (float32)."""
    clouds = [Graph3D(seed=seed)(MolInput(s)) for s in smiles]
    y = np.linspace(-1.0, 1.0, len(smiles))
    return GraphSet(clouds, y, atom_fields=("z", "pos"), edge_fields=()).__getitems__(
        list(range(len(smiles)))
    )[0]


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


def transformed(batch: dict, rotation: torch.Tensor, shift: torch.Tensor) -> dict:
    """The batch with every position mapped to R·r + t (computed in float64)."""
    pos = batch["pos"].double() @ rotation.T + shift
    return {**batch, "pos": pos.to(batch["pos"].dtype)}


def permuted(batch: dict, seed: int) -> tuple[dict, torch.Tensor]:
    """The batch with the atoms of each molecule shuffled (molecules stay contiguous and
    in order); returns the batch and the permutation (new position → old atom)."""
    g = torch.Generator().manual_seed(seed)
    order = []
    for molecule in torch.unique(batch["batch"]):
        atoms = torch.nonzero(batch["batch"] == molecule).flatten()
        order.append(atoms[torch.randperm(len(atoms), generator=g)])
    perm = torch.cat(order)
    out = dict(batch)
    for field in ("z", "pos", "batch", "x"):
        if field in out:
            out[field] = batch[field][perm]
    return out, perm


def molecule_output(model: nn.Module, batch: dict) -> torch.Tensor:
    """One vector per molecule from a backbone's output (per-atom outputs averaged)."""
    out = model(batch)
    if isinstance(out, tuple):
        h, segment = out
        n = len(batch["y"])
        summed = h.new_zeros(n, h.shape[-1]).index_add_(0, segment, h)
        return summed / torch.bincount(segment, minlength=n).clamp(min=1).unsqueeze(-1)
    return out


def assert_invariant(model: nn.Module, batch: dict, reflect: bool, atol: float = 1e-5) -> None:
    """The model's molecule outputs do not change under a random rotation (with a
    reflection if `reflect`), a translation, and a permutation of each molecule's atoms.

    Outputs are compared in float64 (the model is cast), so the tolerance measures the
    symmetry, not float32 rounding."""
    model = model.double().eval()
    batch = {k: (v.double() if v.is_floating_point() else v) for k, v in batch.items()}
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
