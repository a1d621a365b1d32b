"""BenchML's 3D representations: a vector per molecule from its atoms in space.

The Coulomb matrix (its sorted eigenvalues), SOAP, ACSF and MBTR, as `dscribe` computes
them, from the same conformers the 3D models read: the `graph3d` feature cache (QM9's
DFT geometries as given; for SMILES-only data sets the seeded ETKDG + MMFF94 conformer,
`oodmol.data.featurize.conformers`). The representation's own cache is built on that
one (`inputs`), so a molecule without a conformer is refused here with the reason, and a
change of the conformer settings changes this cache's key.

Atomic environments (SOAP, ACSF) are pooled into one vector per molecule (`pooling`:
their mean, as BenchML's intensive models, or their sum); MBTR and the Coulomb
eigenvalues describe the whole molecule. The defaults are BenchML's (Poelking et al.,
`benchml/models/mod_bench.py` and `plugins/plugin_dscribe.py`): SOAP's "minimal" basis,
ACSF's "smart" universal parameters (ASAP's heuristic from the elements' bond lengths),
MBTR's three terms. The elements (`species`) are those of the data set where its source
declares them (configs/model/representation/), else the eight of the benchmark's organic
data sets; a molecule with another element is refused with the reason.
"""

from __future__ import annotations

import math
import warnings
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from importlib.metadata import version
from typing import Any, ClassVar

import numpy as np

from oodmol.data.featurize.base import FeaturizationError, Featurizer, MolInput
from oodmol.data.featurize.graph3d import Graph3D
from oodmol.data.limits import seconds

# the elements of the benchmark's data sets but for a handful of Lipophilicity molecules
# (boron, silicon, phosphorus, selenium, iodine: 15 of 4,200)
DEFAULT_SPECIES = ("H", "C", "N", "O", "F", "S", "Cl", "Br")
POOLINGS = ("mean", "sum")
# atoms with their hydrogens: Graph3D's own limit, so no molecule with a conformer is refused
MAX_ATOMS = 500
TIME_LIMIT = 60.0  # seconds per molecule: dscribe takes milliseconds
_SYMBOLS = {
    "H": 1, "B": 5, "C": 6, "N": 7, "O": 8, "F": 9, "Si": 14, "P": 15, "S": 16,
    "Cl": 17, "Se": 34, "Br": 35, "I": 53,
}  # fmt: skip
# ASAP's universal length scales (asaplib/hypers/univeral_length_scales.py): per element,
# its longest and its shortest bond length (Å), from which the ACSF heuristic draws its
# cut-off and its radial grid
_BOND_LENGTHS = {
    "H": (1.2, 0.75), "B": (1.8, 1.6), "C": (1.4, 1.3), "N": (1.6, 1.1), "O": (1.7, 1.2),
    "F": (2.1, 1.4), "Si": (2.4, 2.3), "P": (2.5, 1.9), "S": (2.3, 1.9), "Cl": (2.6, 2.0),
    "Se": (2.8, 2.2), "Br": (2.8, 2.3), "I": (3.2, 2.7),
}  # fmt: skip
_calculators: dict[str, Any] = {}  # dscribe objects of this process, by settings


class AtomisticRepresentation(Featurizer):
    """A fixed-length float32 vector `x` per molecule from its atoms in 3D (`describe`).

    `species`: the element symbols the representation has channels for (sorted by atomic
    number; an atom of another element refuses its molecule). `conformers`: the `Graph3D`
    featuriser whose cache gives the coordinates (its defaults are configs/featurizer/
    graph3d.yaml's). A molecule of more than `max_atoms` atoms with its hydrogens is
    refused, one that takes over `time_limit` seconds by the cache's build.
    """

    version: ClassVar[int] = 1

    def __init__(
        self,
        species: list[str] | tuple[str, ...] = DEFAULT_SPECIES,
        conformers: Graph3D | None = None,
        max_atoms: int = MAX_ATOMS,
        time_limit: float | None = TIME_LIMIT,
    ) -> None:
        unknown = sorted(set(species) - set(_SYMBOLS))
        if unknown or not species:
            raise ValueError(
                f"{type(self).__name__}: species {list(species)} holds elements it has no "
                f"data for ({unknown}); known: {list(_SYMBOLS)}"
            )
        self.species = tuple(sorted(set(species), key=_SYMBOLS.__getitem__))
        self.conformers = conformers if conformers is not None else Graph3D()
        self.max_atoms = max_atoms
        self.time_limit = seconds(time_limit)

    @abstractmethod
    def settings(self) -> dict:
        """The representation's own settings (JSON values), part of `params`."""

    @abstractmethod
    def describe(self, atomic_numbers: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """The vector of one molecule (float64)."""

    def params(self) -> dict:
        return {
            "version": self.version,
            "dscribe": version("dscribe"),
            "species": list(self.species),
            **self.settings(),
            "conformers": {"name": self.conformers.name, "params": self.conformers.params()},
            "max_atoms": self.max_atoms,
            "time_limit": self.time_limit,
        }

    def built_on(self) -> Graph3D:
        return self.conformers

    def input_from(
        self, smiles: str, arrays: dict[str, np.ndarray] | None, refused: str | None
    ) -> MolInput:
        """The molecule's atoms and conformer coordinates; one without a conformer
        carries the conformer cache's reason."""
        if arrays is None:
            reason = f"no conformer in the {self.conformers.name} cache ({refused})"
            return MolInput(smiles, problem=reason)
        return MolInput(smiles, arrays["z"], arrays["pos"])

    def __call__(self, mol: MolInput) -> dict[str, np.ndarray]:
        if mol.coords is None or mol.atomic_numbers is None:
            raise FeaturizationError(mol.problem or "no 3D coordinates")
        z = np.asarray(mol.atomic_numbers, dtype=np.int64)
        if len(z) > self.max_atoms:
            raise FeaturizationError(
                f"{len(z)} atoms with hydrogens, more than max_atoms={self.max_atoms}"
            )
        allowed = {_SYMBOLS[s] for s in self.species}
        outside = sorted(set(z.tolist()) - allowed)
        if outside:
            raise FeaturizationError(
                f"atomic numbers {outside} are not among the species {list(self.species)}"
            )
        x = self.describe(z, np.asarray(mol.coords, dtype=np.float64))
        return {"x": np.asarray(x, dtype=np.float32)}

    def _calculator(self, key: str, make) -> Any:
        """A dscribe object, made once per process and settings (dscribe objects are
        cheap to use, not to build, and are not what a featuriser pickles)."""
        if key not in _calculators:
            _calculators[key] = make()
        return _calculators[key]


def _atoms(atomic_numbers: np.ndarray, positions: np.ndarray):
    from ase import Atoms

    return Atoms(numbers=atomic_numbers, positions=positions)


def pool(per_atom: np.ndarray, pooling: str) -> np.ndarray:
    """One vector from per-atom rows: their mean or their sum."""
    if pooling == "mean":
        return per_atom.mean(axis=0)
    if pooling == "sum":
        return per_atom.sum(axis=0)
    raise ValueError(f"pooling={pooling!r}: one of {POOLINGS}")


def _check_pooling(pooling: str) -> str:
    if pooling not in POOLINGS:
        raise ValueError(f"pooling={pooling!r}: one of {POOLINGS}")
    return pooling


class CoulombEigenvalues(AtomisticRepresentation):
    """The eigenvalues of the Coulomb matrix (M_ii = Z_i^2.4 / 2, M_ij = Z_i Z_j /
    |r_i - r_j|), sorted by magnitude, largest first, padded with zeros to `n_atoms_max`
    entries (dscribe's `permutation="eigenspectrum"`, BenchML's `bmol_cm_eigenspectrum`)."""

    name = "coulomb"

    def __init__(self, n_atoms_max: int = MAX_ATOMS, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if n_atoms_max < self.max_atoms:
            raise ValueError(
                f"n_atoms_max={n_atoms_max} is below max_atoms={self.max_atoms}: a molecule "
                "could have more eigenvalues than the vector has entries"
            )
        self.n_atoms_max = n_atoms_max

    def settings(self) -> dict:
        return {"n_atoms_max": self.n_atoms_max, "permutation": "eigenspectrum"}

    def describe(self, atomic_numbers: np.ndarray, positions: np.ndarray) -> np.ndarray:
        from dscribe.descriptors import CoulombMatrix

        n = len(atomic_numbers)
        matrix = CoulombMatrix(n_atoms_max=n, permutation="eigenspectrum")
        values = matrix.create(_atoms(atomic_numbers, positions))
        out = np.zeros(self.n_atoms_max)
        out[:n] = values
        return out


class SOAP(AtomisticRepresentation):
    """Smooth overlap of atomic positions: each atom's power spectrum (GTO radial basis,
    `n_max` × `l_max`, Gaussian width `sigma` Å, cut-off `r_cut` Å, every pair of
    species), pooled over the atoms. BenchML's "minimal" SOAP: r_cut 3, n_max 6, l_max 4,
    sigma 1 ("standard": 5, 9, 6)."""

    name = "soap"

    def __init__(
        self,
        r_cut: float = 3.0,
        n_max: int = 6,
        l_max: int = 4,
        sigma: float = 1.0,
        rbf: str = "gto",
        pooling: str = "mean",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.r_cut, self.n_max, self.l_max = float(r_cut), int(n_max), int(l_max)
        self.sigma, self.rbf = float(sigma), rbf
        self.pooling = _check_pooling(pooling)

    def settings(self) -> dict:
        return {
            "r_cut": self.r_cut,
            "n_max": self.n_max,
            "l_max": self.l_max,
            "sigma": self.sigma,
            "rbf": self.rbf,
            "pooling": self.pooling,
        }

    def describe(self, atomic_numbers: np.ndarray, positions: np.ndarray) -> np.ndarray:
        from dscribe.descriptors import SOAP as DscribeSOAP

        def make():
            return DscribeSOAP(
                species=list(self.species),
                r_cut=self.r_cut,
                n_max=self.n_max,
                l_max=self.l_max,
                sigma=self.sigma,
                rbf=self.rbf,
                periodic=False,
            )

        soap = self._calculator(f"soap{self.species}{self.settings()}", make)
        return pool(soap.create(_atoms(atomic_numbers, positions)), self.pooling)


class ACSF(AtomisticRepresentation):
    """Atom-centred symmetry functions (Behler): radial G2 and angular G4 functions per
    element and pair of elements, pooled over the atoms. Their cut-off and parameters
    follow ASAP's universal heuristic from the species' bond lengths
    (`universal_acsf_parameters`), as BenchML's `UniversalDscribeACSF`; `scalerange`
    1.2 and `sharpness` 1.0 are its "smart" setting (0.85/1.0 "minimal", 1.8/1.2
    "longrange")."""

    name = "acsf"

    def __init__(
        self,
        scalerange: float = 1.2,
        sharpness: float = 1.0,
        pooling: str = "mean",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.scalerange, self.sharpness = float(scalerange), float(sharpness)
        self.pooling = _check_pooling(pooling)
        self.parameters = universal_acsf_parameters(self.species, self.scalerange, self.sharpness)

    def settings(self) -> dict:
        return {
            "scalerange": self.scalerange,
            "sharpness": self.sharpness,
            "pooling": self.pooling,
            **self.parameters,
        }

    def describe(self, atomic_numbers: np.ndarray, positions: np.ndarray) -> np.ndarray:
        from dscribe.descriptors import ACSF as DscribeACSF

        def make():
            return DscribeACSF(
                species=list(self.species),
                r_cut=self.parameters["r_cut"],
                g2_params=self.parameters["g2_params"],
                g4_params=self.parameters["g4_params"],
                periodic=False,
            )

        acsf = self._calculator(f"acsf{self.species}{self.settings()}", make)
        return pool(acsf.create(_atoms(atomic_numbers, positions)), self.pooling)


def universal_acsf_parameters(
    species: tuple[str, ...], scalerange: float = 1.2, sharpness: float = 1.0
) -> dict:
    """ASAP's universal ACSF parameters for a set of elements (Cheng et al.,
    `asaplib.hypers.hyper_acsf.gen_default_acsf_hyperparameters`): cut-off = the longest
    bond length × 1.3 × `scalerange` (2 significant figures, at least 2 Å); N =
    int(`sharpness` × (cut-off − shortest bond) / 0.5) radial shells on a geometric grid;
    G2 functions centred at 0 and shifted, G4 functions with η on a log grid of N // 2
    values, ζ ∈ {1, 4, 16}, λ = ±1; each kept where it reaches beyond the shortest bond."""
    shortest = min(_BOND_LENGTHS[s][1] for s in species)
    longest = max(_BOND_LENGTHS[s][0] for s in species)
    cutoff = max(_significant(longest * 1.3 * scalerange), 2.0)
    n = int(sharpness * (cutoff - shortest) / 0.5)
    if n < 1:
        raise ValueError(f"ACSF: scalerange={scalerange}, sharpness={sharpness} leave no shells")
    shifts = cutoff * (1.0 / n) ** (np.arange(n + 1) / n)
    g2 = [[_significant(1.0 / s**2), 0.0] for s in shifts if 3 * s > shortest]
    for i in range(n):
        eta = 1.0 / (shifts[n - i] - shifts[n - i - 1]) ** 2
        if shifts[n - i] + 3 * math.sqrt(1 / eta) > shortest:
            g2.append([_significant(eta), _significant(shifts[n - i])])
    g4 = [
        [_significant(eta), float(zeta), float(sign)]
        for eta in np.logspace(-3, 0, n // 2)
        for zeta in (1.0, 4.0, 16.0)
        if 3 * math.sqrt(1 / eta) > shortest
        for sign in (1, -1)
    ]
    return {"r_cut": cutoff, "g2_params": g2, "g4_params": g4}


def _significant(value: float, digits: int = 2) -> float:
    return float(f"{value:.{digits}g}")


# BenchML's MBTR (plugin_dscribe.DscribeMBTR): three terms, each on a grid of 10 points
# with Gaussians of width 0.1, each normalised to unit length ("l2_each")
MBTR_TERMS = {
    "k1": {
        "geometry": {"function": "atomic_number"},
        "grid": {"min": 0, "max": 8, "n": 10, "sigma": 0.1},
    },
    "k2": {
        "geometry": {"function": "inverse_distance"},
        "grid": {"min": 0, "max": 1, "n": 10, "sigma": 0.1},
        "weighting": {"function": "exp", "scale": 0.5, "threshold": 1e-3},
    },
    "k3": {
        "geometry": {"function": "cosine"},
        "grid": {"min": -1, "max": 1, "n": 10, "sigma": 0.1},
        "weighting": {"function": "exp", "scale": 0.5, "threshold": 1e-3},
    },
}


class MBTR(AtomisticRepresentation):
    """Many-body tensor representation (Huo & Rupp): Gaussian-broadened distributions of
    atomic numbers (k1), inverse distances (k2) and angle cosines (k3) per element,
    pair and triple, distance-weighted; each term normalised to unit length and the
    terms concatenated (`terms`: BenchML's defaults, `MBTR_TERMS`)."""

    name = "mbtr"

    def __init__(self, terms: dict | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.terms = _plain(terms if terms is not None else MBTR_TERMS)

    def settings(self) -> dict:
        return {"terms": self.terms, "normalization": "l2_each"}

    def describe(self, atomic_numbers: np.ndarray, positions: np.ndarray) -> np.ndarray:
        from dscribe.descriptors import MBTR as DscribeMBTR

        atoms = _atoms(atomic_numbers, positions)
        parts = []
        for name, term in sorted(self.terms.items()):

            def make(term: dict = term):
                return DscribeMBTR(
                    **term, normalization="l2", species=list(self.species), periodic=False
                )

            mbtr = self._calculator(f"mbtr{self.species}{name}{term}", make)
            with warnings.catch_warnings():  # dscribe 2.1.2 reads ase's deprecated calculator
                warnings.simplefilter("ignore", FutureWarning)
                parts.append(mbtr.create(atoms))
        return np.concatenate(parts)


def _plain(tree: Any) -> Any:
    """Nested mappings and sequences (Hydra's configs) as dicts and lists."""
    if isinstance(tree, Mapping):
        return {str(k): _plain(v) for k, v in tree.items()}
    if isinstance(tree, Sequence) and not isinstance(tree, str):
        return [_plain(v) for v in tree]
    return tree
