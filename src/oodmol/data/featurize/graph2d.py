"""Molecular graphs with Chemprop v2's default atom and bond features, built with RDKit."""

from __future__ import annotations

import numpy as np
import rdkit
from rdkit import Chem
from rdkit.Chem.rdchem import BondType, HybridizationType

from oodmol.data.featurize.base import LimitedFeaturizer, MolInput

# Chemprop v2's `MultiHotAtomFeaturizer.v2()`: one-hot blocks, each with a trailing
# "other" bit, then aromaticity and mass / 100.
ATOMIC_NUMBERS = (*range(1, 37), 53)  # H to Kr, and I
DEGREES = tuple(range(6))
FORMAL_CHARGES = (-1, -2, 1, 2, 0)
CHIRAL_TAGS = tuple(range(4))
NUM_HS = tuple(range(5))
HYBRIDIZATIONS = (
    HybridizationType.S,
    HybridizationType.SP,
    HybridizationType.SP2,
    HybridizationType.SP2D,
    HybridizationType.SP3,
    HybridizationType.SP3D,
    HybridizationType.SP3D2,
)
_ATOM_BLOCKS = (ATOMIC_NUMBERS, DEGREES, FORMAL_CHARGES, CHIRAL_TAGS, NUM_HS, HYBRIDIZATIONS)
ATOM_DIM = sum(len(block) + 1 for block in _ATOM_BLOCKS) + 2  # 72

# Chemprop v2's `MultiHotBondFeaturizer()`: a "no bond" bit (always 0 here), bond type
# (no "other" bit), conjugated, in ring, stereo (with an "other" bit).
BOND_TYPES = (BondType.SINGLE, BondType.DOUBLE, BondType.TRIPLE, BondType.AROMATIC)
STEREOS = tuple(range(6))  # rdkit BondStereo: NONE, ANY, Z, E, CIS, TRANS
BOND_DIM = 1 + len(BOND_TYPES) + 2 + len(STEREOS) + 1  # 14


def _block_columns(blocks: tuple[tuple, ...]) -> list[tuple[dict, int]]:
    """For each one-hot block: the column of every known value, and the block's "other"
    column (its last) for values it does not list."""
    columns, start = [], 0
    for block in blocks:
        columns.append(({value: start + i for i, value in enumerate(block)}, start + len(block)))
        start += len(block) + 1
    return columns


_ATOM_COLUMNS = _block_columns(_ATOM_BLOCKS)
_BOND_TYPE_COLUMN = {bond_type: 1 + i for i, bond_type in enumerate(BOND_TYPES)}
_STEREO_START = 1 + len(BOND_TYPES) + 2


def atom_features(atom: Chem.Atom) -> np.ndarray:
    """Chemprop v2's multi-hot vector of one atom (float32, length `ATOM_DIM`)."""
    x = np.zeros(ATOM_DIM, dtype=np.float32)
    values = (
        atom.GetAtomicNum(),
        atom.GetTotalDegree(),
        atom.GetFormalCharge(),
        int(atom.GetChiralTag()),
        atom.GetTotalNumHs(),
        atom.GetHybridization(),
    )
    for value, (known, other) in zip(values, _ATOM_COLUMNS, strict=True):
        x[known.get(value, other)] = 1.0
    x[-2] = float(atom.GetIsAromatic())
    x[-1] = 0.01 * atom.GetMass()
    return x


def bond_features(bond: Chem.Bond) -> np.ndarray:
    """Chemprop v2's multi-hot vector of one bond (float32, length `BOND_DIM`)."""
    x = np.zeros(BOND_DIM, dtype=np.float32)
    column = _BOND_TYPE_COLUMN.get(bond.GetBondType())
    if column is not None:  # Chemprop keeps no "other" bit for bond types
        x[column] = 1.0
    x[1 + len(BOND_TYPES)] = float(bond.GetIsConjugated())
    x[2 + len(BOND_TYPES)] = float(bond.IsInRing())
    stereo = int(bond.GetStereo())
    x[_STEREO_START + (stereo if stereo in STEREOS else len(STEREOS))] = 1.0
    return x


class Graph2D(LimitedFeaturizer):
    """A molecule's bond graph: `x` float32 [n_atoms, 72], `edge_attr` float32
    [2·n_bonds, 14] and `edge_index` int64 [2, 2·n_bonds] (row 0 source, row 1 target).

    Every bond gives two directed edges, stored next to each other: edge 2k is
    begin → end atom of bond k and edge 2k + 1 its reverse, so the reverse of edge e is
    ``e ^ 1`` (also after batching, since each molecule has an even number of edges).
    The features match Chemprop v2's defaults (`MultiHotAtomFeaturizer.v2()`,
    `MultiHotBondFeaturizer()`), atoms in RDKit's order for the canonical SMILES.
    `add_hs` makes hydrogens explicit atoms, as BOOM's topological GNN had them.

    `limits`: `max_smiles_length`, `max_atoms` (heavy atoms) and `time_limit`, with
    `LimitedFeaturizer`'s defaults.
    """

    name = "graph2d"

    def __init__(self, add_hs: bool = False, **limits: float | None) -> None:
        super().__init__(**limits)
        self.add_hs = add_hs

    def params(self) -> dict:
        return {
            "version": 1,
            "rdkit": rdkit.__version__,
            "atoms": "chemprop_v2",
            "bonds": "chemprop_v2",
            "add_hs": self.add_hs,
            **self.limit_params(),
        }

    def __call__(self, mol: MolInput) -> dict[str, np.ndarray]:
        rd_mol = self.parse(mol.smiles)
        if rd_mol is None:
            raise ValueError(f"RDKit cannot parse {mol.smiles!r}")
        if self.add_hs:
            rd_mol = Chem.AddHs(rd_mol)
        x = np.stack([atom_features(atom) for atom in rd_mol.GetAtoms()])
        n_bonds = rd_mol.GetNumBonds()
        edge_index = np.empty((2, 2 * n_bonds), dtype=np.int64)
        edge_attr = np.empty((2 * n_bonds, BOND_DIM), dtype=np.float32)
        for k, bond in enumerate(rd_mol.GetBonds()):
            u, v = bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()
            edge_index[:, 2 * k] = u, v
            edge_index[:, 2 * k + 1] = v, u
            edge_attr[2 * k : 2 * k + 2] = bond_features(bond)
        return {"x": x, "edge_index": edge_index, "edge_attr": edge_attr}
