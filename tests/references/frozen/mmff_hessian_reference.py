"""The MMFF94 Hessian of the physics estimates as it was computed before one force field
served every displacement: a frozen copy of the gradient loop of `vibrations` in
`src/oodmol/data/featurize/physics.py` at commit f9fe06c, kept as the reference that
`tests/unit/data/test_physics.py` holds `mmff_hessian` equal to and `bench/mmff_hessian.py`
times it against. Not to be edited: change the live function, not this.

Each gradient comes from a force field built anew at the displaced geometry.
"""

from __future__ import annotations

import numpy as np
from rdkit import Chem
from rdkit.Chem import rdForceFieldHelpers as force_fields
from rdkit.Geometry import Point3D


def field_per_displacement_hessian(
    mol: Chem.Mol, properties, x0: np.ndarray, step: float
) -> np.ndarray:
    """The forward-difference Hessian (kcal/mol/Å², not symmetrised) at `x0` (flat, Å);
    `mol`'s conformer is moved to each displaced geometry."""
    n = len(x0) // 3
    conformer = mol.GetConformer()

    def gradient(x: np.ndarray) -> np.ndarray:
        for i in range(n):
            conformer.SetAtomPosition(i, Point3D(*x[3 * i : 3 * i + 3]))
        return np.asarray(force_fields.MMFFGetMoleculeForceField(mol, properties).CalcGrad())

    at_minimum = gradient(x0)
    hessian = np.empty((3 * n, 3 * n))
    for k in range(3 * n):
        shifted = x0.copy()
        shifted[k] += step
        hessian[k] = (gradient(shifted) - at_minimum) / step
    return hessian
