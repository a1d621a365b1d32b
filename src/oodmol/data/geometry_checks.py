"""Checks of a 3D geometry against its molecule, after "GEOM-drugs revisited"."""

from __future__ import annotations

import numpy as np


def aligned_rmsd(a: np.ndarray, b: np.ndarray) -> float:
    """RMSD (in the coordinates' unit) between two conformations of the same atoms in the
    same order, after the rotation and translation that superpose them best (Kabsch)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if len(a) == 0:
        return 0.0
    a = a - a.mean(axis=0)
    b = b - b.mean(axis=0)
    u, _, vt = np.linalg.svd(a.T @ b)
    sign = np.sign(np.linalg.det(u @ vt)) or 1.0
    rotation = u @ np.diag([1.0, 1.0, sign]) @ vt
    return float(np.sqrt(np.mean(np.sum((a @ rotation - b) ** 2, axis=1))))
