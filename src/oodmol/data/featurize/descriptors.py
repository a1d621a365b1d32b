"""RDKit's full 2D descriptor list, as BOOM's random-forest baseline used it."""

from __future__ import annotations

import math

import numpy as np
import rdkit
from rdkit import Chem
from rdkit.Chem import Descriptors

from oodmol.data.featurize.base import LimitedFeaturizer, MolInput

# Looked up by name in each process: several RDKit descriptor functions are closures
# that do not pickle, so featurisers carry names only.
_FUNCTIONS = dict(Descriptors._descList)
# Heavy atoms: Ipc and AvgIpc grow faster than linearly with size (all descriptors of a
# chain of 300 carbons take 5 s, of 400 carbons 19 s); 2.6x the data sets' largest.
MAX_ATOMS = 300
# Kier's shape indices count the paths of n bonds (Kappa1-3; Phi = Kappa1 Kappa2 / A), and
# a molecule without such a path has no index: RDKit's formula then divides by the
# Hall-Kier alpha alone, which is tiny (tert-butanol's Kappa3 is 9,508; water's Kappa2 is
# -27; neopentane's Kappa3 is 0 where alpha is exactly 0). Such a value lies thousands of
# standard deviations from every molecule that has the path, and a linear model on
# standardised descriptors extrapolates it into a prediction hundreds of units off.
PATH_BONDS = {"Kappa1": 1, "Kappa2": 2, "Kappa3": 3, "Phi": 2}


class RDKitDescriptors(LimitedFeaturizer):
    """All of `rdkit.Chem.Descriptors._descList`, in that order, as one float64 vector `x`;
    or the descriptors `names` lists, in its order (a physicochemical subset:
    configs/featurizer/physchem.yaml).

    float64 because some descriptors (`Ipc` before its log, some BCUT/Chi sums on large
    molecules) exceed float32 and would turn into inf. `Ipc` is replaced by log(1 + Ipc)
    as BOOM did. A shape index of a molecule without the paths it counts (`PATH_BONDS`:
    Kappa3 of a molecule of four heavy atoms or fewer, or of tert-butanol) is undefined:
    NaN. A descriptor that raises or is not finite becomes NaN and is kept;
    imputation from training statistics (`TrainImputer`) happens later, per split.
    A SMILES that RDKit cannot parse gives an all-NaN vector.

    `limits`: `max_smiles_length` and `time_limit`, with `LimitedFeaturizer`'s defaults;
    `max_atoms` counts heavy atoms, and is lower here (`MAX_ATOMS`).
    """

    name = "descriptors"

    def __init__(
        self, max_atoms: int = MAX_ATOMS, names: list[str] | None = None, **limits: float | None
    ) -> None:
        super().__init__(max_atoms=max_atoms, **limits)
        if names is not None:
            unknown = [name for name in names if name not in _FUNCTIONS]
            if unknown or not names:
                raise ValueError(
                    f"descriptors: {unknown or 'an empty list'} not in RDKit's descriptor list "
                    "(rdkit.Chem.Descriptors._descList)"
                )
        self.names: tuple[str, ...] = tuple(_FUNCTIONS) if names is None else tuple(names)
        self._path_bonds = {PATH_BONDS[name] for name in self.names if name in PATH_BONDS}

    @property
    def columns(self) -> tuple[str, ...]:
        """The names of `x`'s entries."""
        return self.names

    def params(self) -> dict:
        return {
            "version": 2,
            "rdkit": rdkit.__version__,
            "ipc": "log1p",
            "shape_indices": "nan without their paths",
            "names": list(self.names),
            **self.limit_params(),
        }

    def __call__(self, mol: MolInput) -> dict[str, np.ndarray]:
        x = np.full(len(self.names), np.nan)
        rd_mol = self.parse(mol.smiles)
        if rd_mol is not None:
            has_paths = {n: bool(Chem.FindAllPathsOfLengthN(rd_mol, n)) for n in self._path_bonds}
            for i, name in enumerate(self.names):
                if has_paths.get(PATH_BONDS.get(name), True):
                    x[i] = _descriptor(name, rd_mol)
        return {"x": x}


def _descriptor(name: str, rd_mol: Chem.Mol) -> float:
    try:
        value = float(_FUNCTIONS[name](rd_mol))
        if name == "Ipc":
            value = math.log1p(value)
    except Exception:  # RDKit raises assorted errors on odd molecules: record as missing
        return math.nan
    return value if math.isfinite(value) else math.nan
