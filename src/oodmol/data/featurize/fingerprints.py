"""Morgan (ECFP-like) fingerprints from RDKit's fingerprint generators."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import rdkit
from rdkit.Chem import rdFingerprintGenerator

from oodmol.data.featurize.base import LimitedFeaturizer, MolInput


class MorganFingerprint(LimitedFeaturizer):
    """Folded Morgan fingerprint `x`: bits as uint8, or counts as float32 (`counts=True`).

    `limits`: `max_smiles_length`, `max_atoms` (heavy atoms) and `time_limit`, with
    `LimitedFeaturizer`'s defaults."""

    name = "morgan"

    def __init__(
        self, radius: int = 2, n_bits: int = 2048, counts: bool = False, **limits: float | None
    ) -> None:
        super().__init__(**limits)
        self.radius = radius
        self.n_bits = n_bits
        self.counts = counts

    def params(self) -> dict:
        return {
            "version": 1,
            "rdkit": rdkit.__version__,
            "radius": self.radius,
            "n_bits": self.n_bits,
            "counts": self.counts,
            **self.limit_params(),
        }

    def __call__(self, mol: MolInput) -> dict[str, np.ndarray]:
        rd_mol = self.parse(mol.smiles)
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
