"""A molecule's canonical SMILES as the cached feature that token models read."""

from __future__ import annotations

import numpy as np

from oodmol.data.featurize.base import Featurizer, MolInput


class SmilesText(Featurizer):
    """The canonical SMILES (from validation) as UTF-8 bytes. Tokenising happens when a
    run reads the cache (`oodmol.data.tokens.TokenFeatures`): the vocabulary comes from
    the run's training molecules, or from a pretrained model."""

    name = "smiles"

    def params(self) -> dict:
        return {"version": 1}

    def __call__(self, mol: MolInput) -> dict[str, np.ndarray]:
        return {"smiles": np.frombuffer(mol.smiles.encode(), dtype=np.uint8).copy()}
