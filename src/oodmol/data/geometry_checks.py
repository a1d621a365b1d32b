"""Checks of a 3D geometry against its molecule, after "GEOM-drugs revisited" (Nikitin,
Dunn, Koes & Isayev, 2025; github.com/isayevlab/geom-drugs-3dgen-evaluation, MIT).

A geometry passes when
1. **its bond graph is the molecule's**: the bonds perceived from its coordinates
   (RDKit's `rdDetermineBonds.DetermineConnectivity`: atoms closer than
   `COVALENT_FACTOR` times the sum of their covalent radii) are the bonds of the
   molecule's own graph with explicit hydrogens, none broken, none formed, so no fragment
   split off. RDKit's default rule (connect-the-dots) read a bond between the bridgeheads
   of strained cages (C…C 1.8-1.97 Å, bicyclo[1.1.1]pentanes) in 5.4 % of a sample of
   3,000 QM9 DFT geometries; 1.2 times the covalent radii reads 1.6 % (still across
   polycyclic cages with shorter transannular distances) and fails none of 300 MMFF94
   conformers of the 10k set; 1.15 breaks a stretched, hydrogen-bonded N-H of an MMFF94
   conformer. Conformers made from the SMILES keep its atom order
   and are compared bond by bond; a given geometry in its own atom order (QM9's DFT
   structures) is compared as a graph (elements and connectivity, up to isomorphism);
2. **every atom's valence is in the table** (`VALENCIES`, the paper's aromatic-aware
   table): an atom's valence is the pair (its aromatic bonds, the summed orders of its
   other bonds with its hydrogens), looked up by element and formal charge, so
   pyridine's N (2, 0), pyrrole's NH (2, 1), a nitro N⁺ (0, 4) and carboxylate O⁻ (0, 1)
   pass, while an aromatic bond is never counted as 1 or 1.5 in a sum (the bug the paper
   found in MiDi's table, which let C with 3 H and an "aromatic" bond pass as 4). The
   valences are those of the geometry's graph: the molecule's bond orders on the bonds it
   kept, single bonds where it formed new ones. One extension, since GEOM-drugs has no
   radicals and 345 molecules of the 10k CSD set are radicals (mostly nitroxides): an
   atom's unpaired electrons count toward its valence (a nitroxide's O• is (0, 1 + 1)).

`check_geometry` checks one molecule; `check_store` every molecule of a 3D feature cache
(those without a geometry fail with the featuriser's reason), cached beside it as a
`GeometryReport`: counts by reason, every failure named, and per molecule what the
geometry's optimiser recorded (GFN2-xTB: RMSD and energy change from the MMFF94 start).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
from rdkit import Chem, RDLogger
from rdkit.Chem import rdDetermineBonds
from rdkit.Geometry import Point3D

from oodmol.data.limits import shown
from oodmol.data.table import MoleculeTable
from oodmol.io import atomic_write_json, atomic_write_text
from oodmol.parallel import Refused, process_map

log = logging.getLogger(__name__)

CHECKS_VERSION = 3  # 2: bonds perceived within 1.2 x the covalent radii; 3: the costs
HARTREE_KCAL = 627.5094740631
COVALENT_FACTOR = 1.2  # two atoms closer than this times their covalent radii are bonded

# The paper's table (`geom_drugs_h_tuple_valencies`): element → formal charge → allowed
# (aromatic bonds, valence from the other bonds including hydrogens). Every element and
# charge of the 10k CSD set and of QM9 is in it; an element or charge that is not is a
# failure, named as such ("no entry"), never a silent pass.
VALENCIES: dict[str, dict[int, tuple[tuple[int, int], ...]]] = {
    "H": {0: ((0, 1),)},
    "C": {
        0: ((0, 4), (2, 2), (2, 1), (3, 0)),
        -1: ((0, 3), (2, 1), (3, 0)),
        1: ((0, 3), (2, 1), (3, 0)),
    },
    "N": {
        0: ((0, 3), (2, 0), (2, 1), (3, 0)),
        1: ((0, 4), (2, 0), (2, 1), (2, 2), (3, 0)),
        -1: ((0, 2), (2, 0)),
        -2: ((0, 1),),
    },
    "O": {0: ((0, 2), (2, 0)), -1: ((0, 1),), 1: ((0, 3),)},
    "F": {0: ((0, 1),)},
    "S": {
        0: ((0, 2), (0, 3), (0, 6), (2, 0)),
        1: ((0, 3), (2, 0), (2, 1), (3, 0)),
        2: ((0, 4), (2, 1), (2, 2)),
        3: ((0, 2), (0, 5)),
        -1: ((0, 1),),
    },
    "Cl": {0: ((0, 1),), 1: ((0, 2),)},
    "Br": {0: ((0, 1),), 1: ((0, 2),)},
    "I": {0: ((0, 1),), 1: ((0, 2),), 2: ((0, 3),)},
    "P": {0: ((0, 3), (0, 5)), 1: ((0, 4),)},
    "Si": {0: ((0, 4),), 1: ((0, 5),)},
    "B": {-1: ((0, 4),), 0: ((0, 3),)},
    "Bi": {0: ((0, 3),), 2: ((0, 5),)},
}
AROMATIC = 1.5  # a bond order that marks an aromatic bond
# reasons a geometry fails, as the report counts them
BOND_BROKEN = "bond broken"
BOND_FORMED = "bond formed"
FRAGMENTS = "fragments split off"
GRAPH_DIFFERS = "bond graph differs from the molecule's"
VALENCE = "valence outside the table"
NO_GEOMETRY = "no geometry"
UNREADABLE = "SMILES unreadable"
_SHOWN_PROBLEMS = 3


@dataclass(frozen=True)
class Problem:
    """One way a geometry fails: its reason (counted) and what exactly (named)."""

    reason: str
    detail: str

    def __str__(self) -> str:
        return f"{self.reason}: {self.detail}"


def described(problems: list[Problem]) -> str:
    """A molecule's problems in one line, each reason once with its first few details:
    two fragments laid on top of each other put every atom's valence outside the table."""
    details: dict[str, list[str]] = {}
    for problem in problems:
        details.setdefault(problem.reason, []).append(problem.detail)
    return "; ".join(f"{reason}: {_first_few(named)}" for reason, named in details.items())


def _first_few(named: list[str]) -> str:
    """The first `_SHOWN_PROBLEMS` of `named`, and how many more there are."""
    more = len(named) - _SHOWN_PROBLEMS
    return ", ".join(named[:_SHOWN_PROBLEMS]) + (f" and {more} more" if more > 0 else "")


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


def valence_problems(
    numbers: list[int] | np.ndarray,
    charges: list[int] | np.ndarray,
    bonds: list[tuple[int, int, float]],
    radicals: list[int] | np.ndarray | None = None,
    table: dict = VALENCIES,
) -> list[Problem]:
    """Atoms whose (aromatic bonds, other valence) is not allowed for their element and
    formal charge; `bonds` are (i, j, order), order 1, 2, 3 or `AROMATIC`, every hydrogen
    an atom of its own; an atom's `radicals` (unpaired electrons) count as valence."""
    aromatic = Counter()
    other = Counter(dict(enumerate(radicals))) if radicals is not None else Counter()
    for i, j, order in bonds:
        for atom in (i, j):
            if order == AROMATIC:
                aromatic[atom] += 1
            else:
                other[atom] += int(order)
    table_of = Chem.GetPeriodicTable()
    problems = []
    for atom, (z, charge) in enumerate(zip(numbers, charges, strict=True)):
        symbol = table_of.GetElementSymbol(int(z))
        combo = (aromatic[atom], other[atom])
        allowed = table.get(symbol, {}).get(int(charge))
        if allowed is None:
            problems.append(Problem(VALENCE, f"no entry for {symbol} charge {int(charge):+d}"))
        elif combo not in allowed:
            problems.append(
                Problem(
                    VALENCE,
                    f"{symbol}{atom} charge {int(charge):+d} with {combo[0]} aromatic bonds "
                    f"and valence {combo[1]} otherwise",
                )
            )
    return problems


def molecule_bonds(mol: Chem.Mol) -> dict[tuple[int, int], float]:
    """(i, j) with i < j → bond order (`AROMATIC` for aromatic bonds) of an RDKit molecule."""
    return {
        _pair(b.GetBeginAtomIdx(), b.GetEndAtomIdx()): (
            AROMATIC if b.GetIsAromatic() else b.GetBondTypeAsDouble()
        )
        for b in mol.GetBonds()
    }


def perceived_bonds(numbers: np.ndarray, positions: np.ndarray) -> set[tuple[int, int]]:
    """The bonds (i, j), i < j, that RDKit perceives from the coordinates alone: atoms
    closer than `COVALENT_FACTOR` times the sum of their covalent radii."""
    mol = Chem.RWMol()
    for z in numbers:
        mol.AddAtom(Chem.Atom(int(z)))
    conformer = Chem.Conformer(len(numbers))
    for i, (x, y, z) in enumerate(np.asarray(positions, dtype=np.float64)):
        conformer.SetAtomPosition(i, Point3D(x, y, z))
    mol.AddConformer(conformer, assignId=True)
    rdDetermineBonds.DetermineConnectivity(mol, useVdw=True, covFactor=COVALENT_FACTOR)
    return {_pair(b.GetBeginAtomIdx(), b.GetEndAtomIdx()) for b in mol.GetBonds()}


def check_geometry(smiles: str, numbers: np.ndarray, positions: np.ndarray) -> list[Problem]:
    """Why a geometry of `smiles` fails the checks (see the module docstring); empty when
    it passes. Atoms are in the order of RDKit's molecule with explicit hydrogens (the
    conformers made from SMILES), or in any order (a data set's own geometry)."""
    RDLogger.DisableLog("rdApp.*")
    mol = Chem.MolFromSmiles(smiles)
    if mol is None:
        return [Problem(UNREADABLE, shown(smiles))]
    mol = Chem.AddHs(mol)
    numbers = np.asarray(numbers)
    expected = molecule_bonds(mol)
    found = perceived_bonds(numbers, positions)
    same_order = len(numbers) == mol.GetNumAtoms() and all(
        int(z) == a.GetAtomicNum() for z, a in zip(numbers, mol.GetAtoms(), strict=True)
    )
    if not same_order or found != set(expected):
        # the same graph in another atom order (or symmetric atoms swapped) passes
        mapping = _graph_mapping(mol, numbers, found)
        if mapping is not None:
            found = {_pair(mapping[i], mapping[j]) for i, j in found}
        elif not same_order:
            return [
                Problem(
                    GRAPH_DIFFERS,
                    f"{len(found)} bonds perceived, {len(expected)} in the molecule, "
                    f"{_n_fragments(len(numbers), found)} fragments "
                    f"({len(Chem.GetMolFrags(mol))} in the molecule)",
                )
            ]
    problems = _graph_problems(mol, expected, found)
    atoms = list(mol.GetAtoms())
    bonds = [(i, j, expected.get((i, j), 1.0)) for i, j in sorted(found)]
    return problems + valence_problems(
        [a.GetAtomicNum() for a in atoms],
        [a.GetFormalCharge() for a in atoms],
        bonds,
        [a.GetNumRadicalElectrons() for a in atoms],
    )


def _graph_problems(
    mol: Chem.Mol, expected: dict[tuple[int, int], float], found: set[tuple[int, int]]
) -> list[Problem]:
    symbol = [a.GetSymbol() for a in mol.GetAtoms()]

    def named(pairs) -> str:
        return _first_few([f"{symbol[i]}{i}-{symbol[j]}{j}" for i, j in sorted(pairs)])

    problems = []
    broken = set(expected) - found
    formed = found - set(expected)
    if broken:
        problems.append(Problem(BOND_BROKEN, named(broken)))
    if formed:
        problems.append(Problem(BOND_FORMED, named(formed)))
    n_found = _n_fragments(mol.GetNumAtoms(), found)
    n_expected = len(Chem.GetMolFrags(mol))
    if n_found > n_expected:
        problems.append(Problem(FRAGMENTS, f"{n_found} fragments, {n_expected} in the molecule"))
    return problems


def _graph_mapping(
    mol: Chem.Mol, numbers: np.ndarray, found: set[tuple[int, int]]
) -> list[int] | None:
    """For each atom of the geometry, the molecule's atom it is, where the perceived
    graph is the molecule's (elements and connectivity); None where it is not."""
    if len(found) != mol.GetNumBonds():
        return None
    return _embedding(mol, numbers, found)


def atoms_in_geometry(
    mol: Chem.Mol, numbers: np.ndarray, positions: np.ndarray
) -> list[int] | None:
    """For each atom of the geometry, the atom of `mol` (hydrogens explicit) it is, where
    the geometry shows every bond of `mol`; None where it does not. Perceived contacts
    beyond the bonds are allowed: a strained cage holds some (an ether oxygen within
    `COVALENT_FACTOR` times the covalent radii of a third atom)."""
    return _embedding(mol, numbers, perceived_bonds(numbers, positions))


def _embedding(mol: Chem.Mol, numbers: np.ndarray, found: set[tuple[int, int]]) -> list[int] | None:
    """For each atom of the geometry, the molecule's atom it is, where every bond of the
    molecule is among `found`; None where it is not."""
    elements = [a.GetAtomicNum() for a in mol.GetAtoms()]
    if sorted(int(z) for z in numbers) != sorted(elements):
        return None
    geometry = _skeleton(numbers, found)
    match = geometry.GetSubstructMatch(_skeleton(elements, set(molecule_bonds(mol))))
    if len(match) != len(elements):
        return None
    order = [0] * len(elements)
    for atom, placed in enumerate(match):  # match[atom]: the geometry's atom of mol's atom
        order[placed] = atom
    return order


def _skeleton(numbers, bonds: set[tuple[int, int]]) -> Chem.Mol:
    """Elements and single bonds only, unsanitised: the graph a geometry can show."""
    mol = Chem.RWMol()
    for z in numbers:
        atom = Chem.Atom(int(z))
        atom.SetNoImplicit(True)
        mol.AddAtom(atom)
    for i, j in bonds:
        mol.AddBond(int(i), int(j), Chem.BondType.SINGLE)
    mol = mol.GetMol()
    mol.UpdatePropertyCache(strict=False)
    return mol


def _n_fragments(n_atoms: int, bonds: set[tuple[int, int]]) -> int:
    parent = list(range(n_atoms))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, j in bonds:
        parent[root(i)] = root(j)
    return len({root(i) for i in range(n_atoms)})


def _pair(i: int, j: int) -> tuple[int, int]:
    return (i, j) if i < j else (j, i)


@dataclass
class GeometryReport:
    """The checks of every molecule of one 3D feature cache: how many pass, how many
    fail for each reason, every failure by mol_id, and per molecule the optimiser's record
    (`changes`: RMSD heavy/all atoms in Å and energy change in kcal/mol from the start
    geometry, where the geometry has them; `costs`: the optimiser's energy + gradient
    evaluations and CPU seconds, where it recorded them)."""

    geometry: str
    cache: str
    n_molecules: int
    failed: dict[int, str] = field(default_factory=dict)
    reasons: dict[str, int] = field(default_factory=dict)
    changes: dict[int, list[float]] = field(default_factory=dict)
    costs: dict[int, list[float]] = field(default_factory=dict)

    @property
    def n_passed(self) -> int:
        return self.n_molecules - len(self.failed)

    def summary(self) -> dict:
        """Counts, reasons and a few named examples, for a run's record and the console."""
        out = {
            "geometry": self.geometry,
            "cache": self.cache,
            "molecules": self.n_molecules,
            "passed": self.n_passed,
            "failed": len(self.failed),
            "reasons": dict(sorted(self.reasons.items(), key=lambda kv: -kv[1])),
            "examples": [f"mol_id {k}: {v}" for k, v in list(self.failed.items())[:10]],
        }
        if self.changes:
            values = np.array(list(self.changes.values()), dtype=np.float64)
            for column, name in enumerate(("rmsd_heavy", "rmsd_all", "energy_change_kcal")):
                out[f"median_{name}"] = float(np.median(values[:, column]))
                out[f"mean_{name}"] = float(np.mean(values[:, column]))
        if self.costs:
            steps, seconds = np.array(list(self.costs.values()), dtype=np.float64).T
            out["mean_steps"] = float(steps.mean())
            out["median_steps"] = float(np.median(steps))
            out["mean_cpu_seconds"] = float(seconds.mean())
            out["median_cpu_seconds"] = float(np.median(seconds))
            out["cpu_hours"] = float(seconds.sum() / 3600)
        return out

    def to_json(self) -> dict:
        return {
            "version": CHECKS_VERSION,
            "geometry": self.geometry,
            "cache": self.cache,
            "n_molecules": self.n_molecules,
            "reasons": self.reasons,
            "failed": {str(k): v for k, v in self.failed.items()},
            "changes": {str(k): v for k, v in self.changes.items()},
            "costs": {str(k): v for k, v in self.costs.items()},
        }

    @classmethod
    def from_json(cls, data: dict) -> GeometryReport:
        return cls(
            geometry=data["geometry"],
            cache=data["cache"],
            n_molecules=int(data["n_molecules"]),
            failed={int(k): v for k, v in data["failed"].items()},
            reasons=dict(data["reasons"]),
            changes={int(k): list(v) for k, v in data["changes"].items()},
            costs={int(k): list(v) for k, v in data["costs"].items()},
        )

    def write_csv(self, path: Path, table: MoleculeTable) -> Path:
        """One row per molecule: mol_id, smiles, passed, why not, RMSD, energy change and
        the optimiser's cost."""
        lines = [
            "mol_id,smiles,passed,problem,rmsd_heavy,rmsd_all,energy_change_kcal,steps,cpu_seconds"
        ]
        for mol_id, smiles in zip(table.mol_id.tolist(), table.smiles.tolist(), strict=True):
            problem = self.failed.get(mol_id, "")
            change = self.changes.get(mol_id, ["", "", ""])
            steps, seconds = self.costs.get(mol_id, ["", ""])
            cells = [str(mol_id), smiles, str(int(not problem)), json.dumps(problem)]
            cost = [str(int(steps)) if steps != "" else "", str(seconds)]
            lines.append(",".join(cells + [str(v) for v in change] + cost))
        atomic_write_text(path, "\n".join(lines) + "\n")
        return path


def check_store(
    store,
    table: MoleculeTable,
    geometry: str,
    progress: bool = True,
    n_jobs: int | None = None,
    mol_ids: np.ndarray | None = None,
) -> GeometryReport:
    """The checks of the molecules `mol_ids` (None: every molecule of `table`) in the 3D
    feature cache `store`. Those of every molecule are read from the report beside the
    cache where one was made for it (``<cache>.checks.json``), else made (in worker
    processes) and written there; those of a subset (a run's `max_molecules`), which
    take seconds, are made each time."""
    if mol_ids is not None:
        return _check_all(store, table.take(table.rows_of(mol_ids)), geometry, progress, n_jobs)
    path = Path(f"{store.path}.checks.json")
    key = hashlib.sha256(
        json.dumps(
            {"cache": store.meta["key"], "version": CHECKS_VERSION, "geometry": geometry},
            sort_keys=True,
        ).encode()
    ).hexdigest()
    try:
        data = json.loads(path.read_text())
        if data.get("key") == key:
            return GeometryReport.from_json(data)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    report = _check_all(store, table, geometry, progress, n_jobs)
    try:
        atomic_write_json(path, {"key": key, **report.to_json()})
    except OSError as error:  # a read-only cache folder: the report is made again next time
        log.warning("could not write %s (%s)", path, error)
    return report


def _check_all(store, table, geometry, progress, n_jobs) -> GeometryReport:
    failures = store.failed
    report = GeometryReport(geometry, store.path.name, len(table))
    reasons: Counter = Counter()
    todo = [
        (m, s)
        for m, s in zip(table.mol_id.tolist(), table.smiles.tolist(), strict=True)
        if m not in failures
    ]
    for mol_id in table.mol_id.tolist():
        if mol_id in failures:
            report.failed[mol_id] = f"{NO_GEOMETRY}: {failures[mol_id]}"
            reasons[NO_GEOMETRY] += 1
    results = process_map(
        partial(_check_one, store),
        todo,
        total=len(todo),
        desc=f"checking {geometry} geometries",
        n_jobs=n_jobs,
        progress=progress,
        time_limit=120.0,
    )
    for (mol_id, _), outcome in zip(todo, results, strict=True):
        if isinstance(outcome, Refused):
            outcome = ([Problem(NO_GEOMETRY, f"the check failed: {outcome.reason}")], None, None)
        problems, change, cost = outcome
        if problems:
            report.failed[mol_id] = described(problems)
            reasons.update({p.reason for p in problems})
        if change is not None:
            report.changes[mol_id] = change
        if cost is not None:
            report.costs[mol_id] = cost
    report.reasons = dict(reasons)
    report.failed = dict(sorted(report.failed.items()))
    return report


def _check_one(
    store, job: tuple[int, str]
) -> tuple[list[Problem], list[float] | None, list[float] | None]:
    mol_id, smiles = job
    arrays = store.get(mol_id)
    problems = check_geometry(smiles, arrays["z"], arrays["pos"])
    change = None
    if "rmsd" in arrays and "energy" in arrays:
        energy = arrays["energy"]
        change = [
            float(arrays["rmsd"][0]),
            float(arrays["rmsd"][1]),
            float((energy[1] - energy[0]) * HARTREE_KCAL),
        ]
    cost = None
    if "steps" in arrays and "seconds" in arrays:
        cost = [float(arrays["steps"][0]), float(arrays["seconds"][0])]
    return problems, change, cost


def geometry_featurizers(names) -> dict[str, object]:
    """The 3D featuriser (configs/featurizer/graph3d.yaml) of each named geometry
    (configs/conformers/<name>.yaml), by name: what `geometry_filter` checks."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from oodmol.config import config_dir
    from oodmol.errors import InputError

    known = sorted(path.stem for path in (config_dir() / "conformers").glob("*.yaml"))
    featurizers = {}
    for name in names or ():
        name = str(name)
        if name not in known:
            raise InputError(
                f"geometry_filter names {name!r}, which is not a geometry of "
                f"configs/conformers/ ({', '.join(known)})"
            )
        node = OmegaConf.create(
            {
                "conformers": OmegaConf.load(config_dir() / "conformers" / f"{name}.yaml"),
                "featurizer": OmegaConf.load(config_dir() / "featurizer" / "graph3d.yaml"),
            }
        )
        featurizers[name] = instantiate(node.featurizer)
    return featurizers
