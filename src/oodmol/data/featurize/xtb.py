"""GFN2-xTB geometries: each molecule's ETKDG + MMFF94 conformer re-optimised with the
semi-empirical tight-binding method GFN2-xTB (Bannwarth, Ehlert & Grimme, JCTC 15, 1652,
2019), as "GEOM-drugs revisited" (Nikitin et al., 2025) uses it as the geometry and
energy reference in place of a force field.

GFN2-xTB starts from the force field's minimum: BOOM's conformers stop after RDKit's
default 200 MMFF94 iterations, short of the minimum for two molecules in five of the 10k
set, and every step the force field takes there (microseconds) is one GFN2-xTB need not
take (tens of milliseconds): `force_field_iterations` lets it go on first. The record
keeps the conformer as the start, with its energy and the RMSD from it.

Energies and gradients come from `tblite` (its Python interface,
`tblite.interface.Calculator`, on OpenBLAS where it can be: `tight_binding`); every
self-consistent field after the first starts from the wavefunction of the geometry the
optimiser goes on from. Far from the minimum, until the gradient's norm first falls
within `loose_gradient`, the SCF runs at the looser `loose_accuracy` (tblite's accuracy
scales its convergence thresholds): a step there is steered by a gradient far larger than
the looser SCF's error, and each costs about a fifth less. From then on every SCF runs at
`accuracy`, also where the gradient grows again: BFGS learns its Hessian from differences
of successive gradients, and a difference across two accuracies holds their errors, which
near the minimum are as large as the differences themselves (a flexible molecule whose SCF
switched back and forth there circled for 1,000 steps short of the criteria). The last
two steps, which the criteria read, are always at `accuracy`. (ASE's BFGS only:
geomeTRIC accepts or rejects its steps, and ends, on energy changes that a loose SCF
would blur, so its SCFs all run at `accuracy`.) The optimiser is a library's, chosen by `optimizer`:

- `"ase-bfgs"`: ASE's BFGS (`ase.optimize.BFGS`) on Cartesian coordinates, its initial
  Hessian geomeTRIC's model Hessian (Schlegel-type force constants of the molecule's
  bonds, angles, dihedrals and out-of-plane bends, with rigid-body terms, brought to
  Cartesian coordinates): one energy + gradient per step and little arithmetic around it.
- `"geometric"`: geomeTRIC's optimiser (Wang & Song, JCP 144, 214108, 2016) in its
  translation-rotation internal coordinates (TRIC), with trust radius and rejected steps.
  It needs half the evaluations of ASE's BFGS, but its coordinate transformations (in
  Python) cost more than GFN2-xTB's gradient for the molecules here.

All are told the same criteria: converged when the energy changed by less than
`energy_tolerance` Eh in the last step and the gradient's norm is below
`gradient_tolerance` Eh/bohr (xtb's "normal" level: 5e-6 Eh, 1e-3 Eh/bohr), checked again
on tblite's own energies and gradients before a geometry is kept. A molecule that does not
converge within `max_steps` energy + gradient evaluations, whose self-consistent field
fails, or that the optimiser cannot handle is refused with the reason
(`OptimizationError`).

The molecule's total formal charge and its unpaired electrons (RDKit's radical electrons)
are passed to tblite, so ions, zwitterions and radicals are computed as what they are.
The molecule's own bonds (RDKit's graph) define the internal coordinates.

Cost and quality here: `bench/xtb_optimizers.py` measures both, and the L-BFGS that this
module used before, on the same molecules of the CSD 10k set (docs/guide/geometries.md).
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from importlib.metadata import version
from typing import ClassVar

import numpy as np
from rdkit import Chem
from threadpoolctl import threadpool_limits

from oodmol.data.featurize.base import FeaturizationError
from oodmol.data.featurize.conformers import (
    Conformer,
    GeometryOptimizer,
    optimise_with_force_field,
)
from oodmol.data.featurize.tight_binding import load_tblite
from oodmol.data.geometry_checks import aligned_rmsd

BOHR = 0.529177210903  # Å (CODATA 2018)
HARTREE_KCAL = 627.5094740631  # kcal/mol per Eh
HARTREE_EV = 27.211386245988  # eV per Eh (CODATA 2018)


class OptimizationError(FeaturizationError):
    """A geometry optimisation that failed or did not converge within its limits."""


def xtb_energy_gradient(
    numbers: np.ndarray,
    positions: np.ndarray,
    charge: int = 0,
    unpaired: int = 0,
    method: str = "GFN2-xTB",
    accuracy: float = 1.0,
) -> tuple[float, np.ndarray]:
    """The energy (Eh) and its gradient (Eh/bohr, [n_atoms, 3]) of one geometry
    (positions in Ångström)."""
    calculator = _calculator(numbers, np.asarray(positions, float) / BOHR, charge, unpaired, method)
    calculator.set("accuracy", accuracy)
    result = calculator.singlepoint()
    return float(result.get("energy")), np.asarray(result.get("gradient"))


def _calculator(numbers, positions_bohr, charge, unpaired, method="GFN2-xTB"):
    calculator = load_tblite().Calculator(  # imported in the workers that optimise
        method,
        np.asarray(numbers, dtype=np.int32),
        np.asarray(positions_bohr, dtype=float),
        charge=float(charge),
        uhf=int(unpaired),
    )
    calculator.set("verbosity", 0)
    return calculator


@dataclass
class XTBOptimizer(GeometryOptimizer):
    """GFN2-xTB re-optimisation of a conformer (see the module docstring).

    Records beside `pos`: `start_pos` (the MMFF94 coordinates it started from, float32
    [n_atoms, 3], Å), `energy` (float64 [2]: GFN2-xTB energy at the start and at the
    optimised geometry, Eh), `rmsd` (float64 [2]: start to optimised geometry after
    optimal superposition, heavy atoms and all atoms, Å), `steps` (int32 [1]: energy +
    gradient evaluations), `gradient_norm` (float64 [1]: at the end, Eh/bohr) and
    `seconds` (float64 [1]: the optimisation's CPU time in its process, the force field's
    finish and the start's energy included).
    `force_field_iterations` first lets the conformer's force field (MMFF94, UFF where it
    lacks parameters) go on to its minimum, where GFN2-xTB starts (0: from the conformer
    as it is); the record's start, its energy and the RMSD stay the conformer's. Setting
    `loose_accuracy` to `accuracy` runs every SCF alike. `threads` bounds
    tblite's OpenMP threads in each worker process (the cache's build runs one molecule
    per worker, on every core); it changes no geometry, so it is not one of the cache
    key's `params`.
    """

    name: ClassVar[str] = "xtb"

    method: str = "GFN2-xTB"
    optimizer: str = "ase-bfgs"
    max_steps: int = 1000
    energy_tolerance: float = 5.0e-6
    gradient_tolerance: float = 1.0e-3
    accuracy: float = 1.0
    loose_accuracy: float = 100.0
    loose_gradient: float = 5.0e-3
    force_field_iterations: int = 10_000
    threads: int = 1

    def __post_init__(self) -> None:
        if self.optimizer not in _OPTIMIZERS:
            raise ValueError(
                f"XTBOptimizer: unknown optimizer {self.optimizer!r}; "
                f"give one of {', '.join(_OPTIMIZERS)}"
            )
        if self.max_steps < 1 or self.threads < 1:
            raise ValueError(
                f"XTBOptimizer: max_steps ({self.max_steps}) and threads ({self.threads}) "
                "must be positive"
            )
        for setting in fields(self):  # 1 and 1.0 must give the cache one key
            number = {"int": int, "float": float}.get(str(setting.type))
            if number is not None:
                setattr(self, setting.name, number(getattr(self, setting.name)))

    def params(self) -> dict:
        settings = {k: v for k, v in asdict(self).items() if k != "threads"}
        libraries = {name: version(name) for name in ("tblite", *_LIBRARIES[self.optimizer])}
        return {"version": 4, **libraries, **settings}

    def __call__(self, mol: Chem.Mol, start: Conformer) -> dict[str, np.ndarray]:
        load_tblite()  # loaded before the limit, so that it applies

        charge = Chem.GetFormalCharge(mol)
        unpaired = sum(atom.GetNumRadicalElectrons() for atom in mol.GetAtoms())
        began = time.process_time()
        settled = self.starting_point(mol, start)
        moved = not np.array_equal(settled, start.positions.astype(np.float64))
        x0 = settled / BOHR
        with threadpool_limits(limits=self.threads):
            try:
                calculator = _calculator(start.atomic_numbers, x0, charge, unpaired, self.method)
                run = _Evaluations(calculator, self.max_steps, self)
                if len(x0) == 1:  # an atom: nothing to optimise, its gradient is zero
                    run(x0)
                    run.settle()
                    converged = True
                else:
                    converged = _OPTIMIZERS[self.optimizer](mol, x0, run, self)
                start_energy = run.first_energy
                if converged and moved:  # the record's start is the conformer
                    start_energy = _energy_at(calculator, start.positions, self.accuracy, run)
            except OptimizationError:
                raise
            except _StepLimit:
                converged = False
            except Exception as error:  # tblite's SCF, the optimiser's own failures
                raise OptimizationError(
                    f"{self.method} with {self.optimizer} failed: {type(error).__name__}: {error}"
                ) from None
        g_norm = float(np.linalg.norm(run.gradient))
        if not converged:
            raise OptimizationError(
                f"{self.method} optimisation ({self.optimizer}) did not converge within "
                f"{self.max_steps} steps (|gradient| {g_norm:.1e} Eh/bohr, tolerance "
                f"{self.gradient_tolerance:g})"
            )
        if not (run.fine and self.converged(run.previous_energy, run.energy, run.gradient)):
            raise OptimizationError(
                f"{self.optimizer} stopped short of the criteria: energy change "
                f"{run.energy - run.previous_energy:.1e} Eh, |gradient| {g_norm:.1e} Eh/bohr, "
                f"SCF accuracy of the last two steps {run.accuracies[0]:g}, "
                f"{run.accuracies[1]:g} (the criteria want {self.accuracy:g})"
            )
        positions = (run.x.reshape(-1, 3) * BOHR).astype(np.float32)
        heavy = start.atomic_numbers > 1
        return {
            "pos": positions,
            "start_pos": start.positions,
            "energy": np.array([start_energy, run.energy], dtype=np.float64),
            "rmsd": np.array(
                [
                    aligned_rmsd(start.positions[heavy], positions[heavy]),
                    aligned_rmsd(start.positions, positions),
                ],
                dtype=np.float64,
            ),
            "steps": np.array([run.count], dtype=np.int32),
            "gradient_norm": np.array([g_norm], dtype=np.float64),
            "seconds": np.array([time.process_time() - began], dtype=np.float64),
        }

    def starting_point(self, mol: Chem.Mol, start: Conformer) -> np.ndarray:
        """Where GFN2-xTB starts (Å): the conformer where its force field converged, else
        (with `force_field_iterations`) the minimum that the force field goes on to."""
        positions = start.positions.astype(np.float64)
        if not self.force_field_iterations or start.converged:
            return positions
        settled = Chem.Mol(mol)
        conformer = settled.GetConformer()
        for index, point in enumerate(positions):
            conformer.SetAtomPosition(index, point.tolist())
        optimise_with_force_field(settled, self.force_field_iterations)
        return settled.GetConformer().GetPositions().astype(np.float64)

    def converged(self, previous_energy: float, energy: float, gradient: np.ndarray) -> bool:
        """xtb's criteria on the last step: the energy change and the gradient's norm."""
        return (
            abs(energy - previous_energy) < self.energy_tolerance
            and float(np.linalg.norm(gradient)) < self.gradient_tolerance
        )


def _energy_at(calculator, positions: np.ndarray, accuracy: float, run: _Evaluations) -> float:
    """The energy (Eh) at `positions` (Å), its SCF at `accuracy` started from the last
    one of `run`, or from scratch where that start does not converge (the conformer can
    lie far from where the optimisation ended)."""
    calculator.set("accuracy", accuracy)
    calculator.update(np.asarray(positions, dtype=np.float64) / BOHR)
    try:
        return float(calculator.singlepoint(run.result, copy=True).get("energy"))
    except Exception:  # tblite's SCF did not converge from that start
        return float(calculator.singlepoint().get("energy"))


class _StepLimit(Exception):
    """The molecule has used its `max_steps` energy + gradient evaluations."""


class _Evaluations:
    """tblite's energy and gradient at one geometry after another, counted, each SCF
    started from the wavefunction of the geometry the optimiser goes on from, at the
    loose accuracy until the gradient first falls within `loose_gradient`, then at the
    full accuracy to the end. `previous_energy` is the energy before the last one; `fine`
    says both were computed at the full accuracy."""

    def __init__(self, calculator, limit: int, settings: XTBOptimizer) -> None:
        self.calculator = calculator
        self.limit = limit
        self.settings = settings
        self.accuracies = (float("nan"), float("nan"))  # the last two evaluations'
        self.loosen = True  # whether the loose phase goes on
        self.count = 0
        self.first_energy = float("nan")
        self.result = None  # the SCF to start the next one from
        self.kept = None  # the accepted geometry's, where an optimiser rejects steps
        self.x = self.gradient = np.zeros(0)
        self.energy = self.previous_energy = float("nan")

    def __call__(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        """Energy (Eh) and gradient (Eh/bohr, flat) at `x` (bohr)."""
        if self.count >= self.limit:
            raise _StepLimit
        x = np.array(x, dtype=np.float64).reshape(-1)
        if self.loosen and self.count > 0:  # the loose phase ends where the gradient is flat
            self.loosen = bool(np.linalg.norm(self.gradient) > self.settings.loose_gradient)
        steep = self.loosen and self.count > 0
        accuracy = self.settings.loose_accuracy if steep else self.settings.accuracy
        self.calculator.set("accuracy", accuracy)
        self.accuracies = (self.accuracies[1], accuracy)
        self.calculator.update(x.reshape(-1, 3))
        # copy: the result kept for a rejected step must not be overwritten in place
        self.result = self.calculator.singlepoint(self.result, copy=True)
        self.count += 1
        energy = float(self.result.get("energy"))
        gradient = np.array(self.result.get("gradient"), dtype=np.float64).reshape(-1)
        if not (np.isfinite(energy) and np.isfinite(gradient).all()):
            raise OptimizationError(f"non-finite energy or gradient at step {self.count}")
        if self.count == 1:
            self.first_energy = energy
        self.previous_energy, self.energy = self.energy, energy
        self.x, self.gradient = x, gradient
        return energy, gradient.copy()

    def settle(self) -> None:
        """The geometry evaluated once is its own minimum (an atom): that evaluation
        stands for the last two the criteria read."""
        self.previous_energy = self.energy
        self.accuracies = (self.accuracies[1],) * 2

    @property
    def fine(self) -> bool:
        """The last two evaluations were at the full accuracy."""
        return self.accuracies == (self.settings.accuracy,) * 2

    def keep(self) -> None:
        """The last geometry evaluated is the optimiser's new position."""
        self.kept = self.result

    def restore(self) -> None:
        """The optimiser went back to the geometry it kept: start the next SCF there."""
        self.result = self.kept


def _ase_bfgs(mol: Chem.Mol, x0: np.ndarray, run: _Evaluations, settings: XTBOptimizer) -> bool:
    """ASE's BFGS from geomeTRIC's model Hessian."""
    from ase.optimize import BFGS

    atoms = _ase_atoms(mol, x0, run)
    optimizer = BFGS(atoms, logfile=None)
    optimizer.H0 = model_hessian(mol, x0) * (HARTREE_EV / BOHR**2)  # eV/Å²
    return _ase_run(optimizer, atoms, run, settings)


def _ase_atoms(mol: Chem.Mol, x: np.ndarray, run: _Evaluations):
    """ASE's atoms of `mol` at `x` (bohr), `run` their calculator (eV, Å)."""
    from ase import Atoms
    from ase.calculators.calculator import Calculator, all_changes

    class TBLite(Calculator):
        implemented_properties = ("energy", "forces")

        def calculate(self, atoms=None, properties=None, system_changes=all_changes) -> None:
            super().calculate(atoms, properties, system_changes)
            energy, gradient = run(self.atoms.positions / BOHR)
            self.results = {
                "energy": energy * HARTREE_EV,
                "forces": -gradient.reshape(-1, 3) * (HARTREE_EV / BOHR),
            }

    atoms = Atoms(numbers=[a.GetAtomicNum() for a in mol.GetAtoms()], positions=x * BOHR)
    atoms.calc = TBLite()
    return atoms


def _ase_run(optimizer, atoms, run: _Evaluations, settings: XTBOptimizer) -> bool:
    """An ASE optimiser stepped until our criteria hold where it stands (its own force
    criterion set to 0, never met)."""
    for _ in optimizer.irun(fmax=0.0, steps=settings.max_steps):
        here = np.array_equal(atoms.positions.reshape(-1) / BOHR, run.x)
        if here and run.fine and settings.converged(run.previous_energy, run.energy, run.gradient):
            return True
    return False


def _geometric(mol: Chem.Mol, x0: np.ndarray, run: _Evaluations, settings: XTBOptimizer) -> bool:
    """geomeTRIC in TRIC coordinates, its criteria mapped onto ours: its RMS gradient is
    the norm over the square root of the atom count; no displacement criteria."""
    from geometric.engine import Engine
    from geometric.errors import GeomOptNotConvergedError
    from geometric.internal import DelocalizedInternalCoordinates
    from geometric.optimize import Optimizer
    from geometric.params import OptParams

    logging.getLogger("geometric.nifty").setLevel(logging.ERROR)  # a report per step
    run.loosen = False  # it judges steps by energy changes (the module docstring)

    class TBLiteEngine(Engine):
        """`run` as a geomeTRIC engine; its saved guess is the accepted step's SCF."""

        def calc_new(self, coords, dirname):
            energy, gradient = run(coords)
            return {"energy": energy, "gradient": gradient}

        def save_guess_files(self, dirname):
            run.keep()

        def load_guess_files(self, dirname):
            run.restore()

    molecule = _geometric_molecule(mol, x0)
    coordinates = DelocalizedInternalCoordinates(molecule, build=True, connect=False)
    params = OptParams(
        convergence_energy=settings.energy_tolerance,
        convergence_grms=settings.gradient_tolerance / np.sqrt(mol.GetNumAtoms()),
        convergence_gmax=settings.gradient_tolerance,
        convergence_drms=np.inf,
        convergence_dmax=np.inf,
        maxiter=settings.max_steps,
        frequency=False,
    )
    with tempfile.TemporaryDirectory() as scratch:  # geomeTRIC's engines want one; unused
        engine = TBLiteEngine(molecule)
        optimizer = Optimizer(
            x0.reshape(-1), molecule, coordinates, engine, scratch, params, print_info=False
        )
        try:
            optimizer.optimizeGeometry()
        except GeomOptNotConvergedError:
            return False
    # where it stopped: its last accepted geometry, the last one evaluated
    if not np.array_equal(optimizer.X.reshape(-1), run.x):
        raise OptimizationError("geomeTRIC stopped away from its last evaluated geometry")
    run.previous_energy = float(optimizer.Eprev)
    return True


def _geometric_molecule(mol: Chem.Mol, x: np.ndarray):
    """geomeTRIC's `Molecule` of `mol` at `x` (bohr), bonded as RDKit's graph says."""
    from geometric.molecule import Molecule

    molecule = Molecule()
    molecule.elem = [atom.GetSymbol() for atom in mol.GetAtoms()]
    molecule.xyzs = [x.reshape(-1, 3) * BOHR]
    molecule.bonds = sorted(
        tuple(sorted((bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()))) for bond in mol.GetBonds()
    )
    molecule.top_settings["read_bonds"] = True
    molecule.build_topology(force_bonds=False)
    return molecule


# the smallest force constant of the model (Eh/bohr² or Eh/rad²): geomeTRIC's bond guess
# (Badger's rule) turns negative for atoms closer than its reference distance, which an
# ETKDG conformer of a salt can place; the softest of its own values is 0.023
MODEL_FLOOR = 0.005


def model_hessian(mol: Chem.Mol, x: np.ndarray) -> np.ndarray:
    """geomeTRIC's guess Hessian of `mol`'s primitive internal coordinates at `x` (bohr),
    in Cartesian coordinates (Eh/bohr², [3n, 3n]): BᵀHB. Its rigid-body coordinates (TRIC)
    keep it positive definite."""
    from geometric.internal import PrimitiveInternalCoordinates

    primitives = PrimitiveInternalCoordinates(_geometric_molecule(mol, x), connect=False)
    x = x.reshape(-1)
    constants = np.maximum(np.diag(primitives.guess_hessian(x)), MODEL_FLOOR)
    b = primitives.wilsonB(x)
    return b.T @ (constants[:, None] * b)


_OPTIMIZERS: dict[str, Callable[[Chem.Mol, np.ndarray, _Evaluations, XTBOptimizer], bool]] = {
    "ase-bfgs": _ase_bfgs,
    "geometric": _geometric,
}
_LIBRARIES = {
    "ase-bfgs": ("ase", "geometric"),
    "geometric": ("geometric",),
}
