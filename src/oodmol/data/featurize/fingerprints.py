"""Morgan (ECFP-like) fingerprints from RDKit's fingerprint generators."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import rdkit
from rdkit.Chem import rdFingerprintGenerator

from oodmol.data.featurize.base import Featurizer, MolInput, parse_within
from oodmol.data.limits import MAX_ATOMS, MAX_SMILES_LENGTH, TIME_LIMIT, seconds


class MorganFingerprint(Featurizer):
    """Folded Morgan fingerprint `x`: bits as uint8, or counts as float32 (`counts=True`).

    A SMILES over `max_smiles_length` characters or a molecule of more than `max_atoms`
    heavy atoms is refused before RDKit's work, one that takes over `time_limit` seconds
    (None: no limit) by the feature cache's build (`oodmol.data.limits`)."""

    name = "morgan"

    def __init__(
        self,
        radius: int = 2,
        n_bits: int = 2048,
        counts: bool = False,
        max_smiles_length: int = MAX_SMILES_LENGTH,
        max_atoms: int = MAX_ATOMS,
        time_limit: float | None = TIME_LIMIT,
    ) -> None:
        self.radius = radius
        self.n_bits = n_bits
        self.counts = counts
        self.max_smiles_length = max_smiles_length
        self.max_atoms = max_atoms
        self.time_limit = seconds(time_limit)

    def params(self) -> dict:
        return {
            "version": 1,
            "rdkit": rdkit.__version__,
            "radius": self.radius,
            "n_bits": self.n_bits,
            "counts": self.counts,
            # they decide which molecules the cache holds
            "max_smiles_length": self.max_smiles_length,
            "max_atoms": self.max_atoms,
            "time_limit": self.time_limit,
        }

    def __call__(self, mol: MolInput) -> dict[str, np.ndarray]:
        rd_mol = parse_within(mol.smiles, self.max_smiles_length, self.max_atoms)
        if rd_mol is None:
            raise ValueError(f"RDKit cannot parse {mol.smiles!r}")
        generator = _generator(self.radius, self.n_bits)
        if self.counts:
            return {"x": generator.GetCountFingerprintAsNumPy(rd_mol).astype(np.float32)}
        return {"x": generator.GetFingerprintAsNumPy(rd_mol).astype(np.uint8)}


@lru_cache(maxsize=8)
def _generator(radius: int, n_bits: int) -> rdFingerprintGenerator.FingerprintGenerator64:
    """One generator per process and setting (generators do not pickle)."""
    return rdFingerprintGenerator.GetMorganGenerator(radius=radius, fpSize=n_bits)
