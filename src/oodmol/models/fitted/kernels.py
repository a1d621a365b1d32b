"""Kernels between molecules' feature vectors, for BenchML's regressors
(`oodmol.models.fitted.kernel_regression`), in float64 numpy.

Each kernel is computed in two steps, so that a search over its length scale reuses the
expensive part: `base` (squared Euclidean or L1 distances, MinMax similarities) once per
pair of sets, then `from_base` for each length scale. Kernels with an explicit feature
map (the linear ones: `features`) can also be solved in feature space when the features
are fewer than the molecules.

| name | k(x, y) | length scale ℓ |
|---|---|---|
| `rbf` | exp(−‖x − y‖² / (2ℓ²)) | yes |
| `laplacian` | exp(−‖x − y‖₁ / ℓ) | yes |
| `linear` | x̂ · ŷ, x̂ = x / ‖x‖ (BenchML's `KernelDot` on unit-length vectors) | no |
| `dot` | x · y (ridge regression's kernel) | no |
| `tanimoto` | Σ min(x, y) / Σ max(x, y) (MinMax; Tanimoto on bits), x, y ≥ 0 | no |
"""

from __future__ import annotations

import numpy as np
from scipy.spatial.distance import cdist

from oodmol.errors import InputError

KERNELS = ("rbf", "laplacian", "linear", "dot", "tanimoto")
SCALED = ("rbf", "laplacian")  # the kernels with a length scale
EXPLICIT = ("linear", "dot")  # the kernels with a finite feature map
_ROWS_PER_CHUNK = 1024  # rows of `a` per L1 distance block: bounds cdist's memory


def check_kernel(name: str) -> str:
    if name not in KERNELS:
        raise InputError(f"kernel={name!r}: there is no such kernel; one of {', '.join(KERNELS)}")
    return name


def primal(name: str, n_features: int, n_molecules: int) -> bool:
    """Whether k is solved in feature space: a linear kernel with fewer features than
    molecules (the d × d system is the smaller one)."""
    return name in EXPLICIT and n_features < n_molecules


def features(name: str, x: np.ndarray) -> np.ndarray:
    """The explicit feature map of a linear kernel: k(x, y) = φ(x) · φ(y)."""
    x = np.asarray(x, dtype=np.float64)
    if name == "dot":
        return x
    if name == "linear":
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)
    raise ValueError(f"kernel={name!r} has no finite feature map (only {EXPLICIT})")


def base(name: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The part of k(a, b) that does not depend on the length scale: squared Euclidean
    distances (rbf), L1 distances (laplacian), the kernel itself (the others)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if name == "rbf":
        return squared_distances(a, b)
    if name == "laplacian":
        return l1_distances(a, b)
    if name == "tanimoto":
        return minmax(a, b)
    if name in EXPLICIT:
        return features(name, a) @ features(name, b).T
    raise ValueError(f"kernel={name!r}: one of {KERNELS}")


def from_base(name: str, values: np.ndarray, length_scale: float | None) -> np.ndarray:
    """The kernel from its `base` at a length scale (in place: `values` is consumed)."""
    if name == "rbf":
        values *= -0.5 / _positive(length_scale) ** 2
        return np.exp(values, out=values)
    if name == "laplacian":
        values *= -1.0 / _positive(length_scale)
        return np.exp(values, out=values)
    return values


def kernel(name: str, a: np.ndarray, b: np.ndarray, length_scale: float | None = None):
    """k(a, b) as a matrix of len(a) × len(b)."""
    return from_base(check_kernel(name), base(name, a, b), length_scale)


def diagonal(name: str, a: np.ndarray, length_scale: float | None = None) -> np.ndarray:
    """k(x, x) for every row x of `a`."""
    a = np.asarray(a, dtype=np.float64)
    if name in ("rbf", "laplacian", "tanimoto"):
        return np.ones(len(a))  # tanimoto: also for an all-zero vector
    phi = features(name, a)
    return np.einsum("ij,ij->i", phi, phi)


def distance_scale(name: str, values: np.ndarray) -> float:
    """The median distance between different molecules of one set, from its `base`
    matrix (a square one): what relative length scales multiply (√ of the median
    squared distance for rbf). 1 for kernels without a length scale."""
    if name not in SCALED:
        return 1.0
    off = values[~np.eye(len(values), dtype=bool)]
    median = float(np.median(off)) if off.size else 1.0
    if name == "rbf":
        median = float(np.sqrt(max(median, 0.0)))
    return median if median > 0 else 1.0


def squared_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """‖a_i − b_j‖², through dot products (one matrix product, no other temporary of
    its size), clipped at 0."""
    out = a @ b.T
    out *= -2.0
    out += np.einsum("ij,ij->i", a, a)[:, None]
    out += np.einsum("ij,ij->i", b, b)[None, :]
    return np.maximum(out, 0.0, out=out)


def l1_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """‖a_i − b_j‖₁, by blocks of rows."""
    out = np.empty((len(a), len(b)))
    for start in range(0, len(a), _ROWS_PER_CHUNK):
        stop = start + _ROWS_PER_CHUNK
        out[start:stop] = cdist(a[start:stop], b, "cityblock")
    return out


def minmax(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Σ min(a_i, b_j) / Σ max(a_i, b_j) for non-negative vectors (1 where both are zero).

    min(u, v) = (u + v − |u − v|) / 2 and max(u, v) = (u + v + |u − v|) / 2, so both sums
    come from the row sums and the L1 distance; for 0/1 vectors the L1 distance is a
    matrix product (Σa + Σb − 2 a·b), and the kernel is the Tanimoto coefficient."""
    if (a < 0).any() or (b < 0).any():
        raise ValueError(
            "the Tanimoto (MinMax) kernel takes non-negative features (fingerprint bits "
            "or counts); these have negative values: use another kernel"
        )
    sums = a.sum(axis=1)[:, None] + b.sum(axis=1)[None, :]
    binary = np.isin(a, (0.0, 1.0)).all() and np.isin(b, (0.0, 1.0)).all()
    l1 = sums - 2.0 * (a @ b.T) if binary else l1_distances(a, b)
    low, high = sums - l1, sums + l1
    return np.divide(low, high, out=np.ones_like(low), where=high > 0)


def _positive(length_scale: float | None) -> float:
    if length_scale is None or not length_scale > 0:
        raise ValueError(f"length scale {length_scale!r}: the kernel needs a positive one")
    return float(length_scale)
