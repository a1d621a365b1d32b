"""The GFN2-xTB geometry optimiser as it was before it came from a library: a frozen copy
of `src/oodmol/data/featurize/xtb.py` at commit 267db86 (`XTBOptimizer`, a hand-written
limited-memory BFGS on Cartesian coordinates driving tblite, renamed here), kept as the
baseline that `bench/xtb_optimizers.py` measures the library optimisers against. Not to be
edited: change the live optimiser, not this.

L-BFGS with 20 curvature pairs, one energy + gradient per step, no atom moved more than
0.3 bohr in a step, memory reset and a quarter step where the energy rose; converged when
the energy changed by less than 5e-6 Eh in the last step and the gradient's norm is below
1e-3 Eh/bohr. Its `steps` count energy + gradient evaluations.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from importlib.metadata import version
from typing import ClassVar

import numpy as np
from rdkit import Chem
from threadpoolctl import threadpool_limits

from oodmol.data.featurize.conformers import Conformer, GeometryOptimizer
from oodmol.data.featurize.xtb import OptimizationError
from oodmol.data.geometry_checks import aligned_rmsd

BOHR = 0.529177210903  # Å (CODATA 2018)


def _calculator(numbers, positions_bohr, charge, unpaired, method="GFN2-xTB"):
    from tblite.interface import Calculator  # here: only the workers that optimise need it

    calculator = Calculator(
        method,
        np.asarray(numbers, dtype=np.int32),
        np.asarray(positions_bohr, dtype=float),
        charge=float(charge),
        uhf=int(unpaired),
    )
    calculator.set("verbosity", 0)
    return calculator


@dataclass
class LBFGSCartesianXTBOptimizer(GeometryOptimizer):
    """GFN2-xTB re-optimisation of a conformer (see the module docstring).

    Records beside `pos`: `start_pos` (the MMFF94 coordinates it started from, float32
    [n_atoms, 3], Å), `energy` (float64 [2]: GFN2-xTB energy at the start and at the
    optimised geometry, Eh), `rmsd` (float64 [2]: start to optimised geometry after
    optimal superposition, heavy atoms and all atoms, Å), `steps` (int32 [1]: energy +
    gradient evaluations) and `gradient_norm` (float64 [1]: at the end, Eh/bohr).
    `threads` bounds tblite's OpenMP threads in each worker process (the cache's build
    runs one molecule per worker, on every core); it changes no geometry, so it is not
    one of the cache key's `params`.
    """

    name: ClassVar[str] = "xtb-lbfgs-cartesian"

    method: str = "GFN2-xTB"
    max_steps: int = 1000
    energy_tolerance: float = 5.0e-6
    gradient_tolerance: float = 1.0e-3
    max_step: float = 0.3
    memory: int = 20
    accuracy: float = 1.0
    threads: int = 1

    def __post_init__(self) -> None:
        if self.max_steps < 1 or self.memory < 1 or self.max_step <= 0 or self.threads < 1:
            raise ValueError(
                f"XTBOptimizer: max_steps ({self.max_steps}), memory ({self.memory}), "
                f"max_step ({self.max_step}) and threads ({self.threads}) must be positive"
            )
        for setting in fields(self):  # 1 and 1.0 must give the cache one key
            number = {"int": int, "float": float}.get(str(setting.type))
            if number is not None:
                setattr(self, setting.name, number(getattr(self, setting.name)))

    def params(self) -> dict:
        settings = {k: v for k, v in asdict(self).items() if k != "threads"}
        made_by = {"version": 1, "tblite": version("tblite"), "optimizer": "lbfgs-cartesian"}
        return made_by | settings

    def __call__(self, mol: Chem.Mol, start: Conformer) -> dict[str, np.ndarray]:
        charge = Chem.GetFormalCharge(mol)
        unpaired = sum(atom.GetNumRadicalElectrons() for atom in mol.GetAtoms())
        x0 = start.positions.astype(np.float64) / BOHR
        with threadpool_limits(limits=self.threads):
            try:
                calculator = _calculator(start.atomic_numbers, x0, charge, unpaired, self.method)
                calculator.set("accuracy", self.accuracy)
                run = _Optimisation(calculator)
                x, energy, gradient, converged = run.minimise(
                    x0,
                    self.max_steps,
                    self.energy_tolerance,
                    self.gradient_tolerance,
                    self.max_step,
                    self.memory,
                )
            except OptimizationError:
                raise
            except Exception as error:  # tblite's SCF or input errors
                raise OptimizationError(f"{self.method} failed: {error}") from None
        g_norm = float(np.linalg.norm(gradient))
        if not converged:
            raise OptimizationError(
                f"{self.method} optimisation did not converge within {self.max_steps} steps "
                f"(|gradient| {g_norm:.1e} Eh/bohr, tolerance {self.gradient_tolerance:g})"
            )
        positions = (x * BOHR).astype(np.float32)
        heavy = start.atomic_numbers > 1
        return {
            "pos": positions,
            "start_pos": start.positions,
            "energy": np.array([run.first_energy, energy], dtype=np.float64),
            "rmsd": np.array(
                [
                    aligned_rmsd(start.positions[heavy], positions[heavy]),
                    aligned_rmsd(start.positions, positions),
                ],
                dtype=np.float64,
            ),
            "steps": np.array([run.steps], dtype=np.int32),
            "gradient_norm": np.array([g_norm], dtype=np.float64),
        }


class _Optimisation:
    """One L-BFGS minimisation on a tblite calculator, counting its evaluations."""

    def __init__(self, calculator) -> None:
        self.calculator = calculator
        self.result = None  # the last result: its wavefunction starts the next SCF
        self.steps = 0
        self.first_energy: float | None = None

    def evaluate(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        self.calculator.update(x.reshape(-1, 3))
        self.result = self.calculator.singlepoint(self.result)
        self.steps += 1
        energy = float(self.result.get("energy"))
        gradient = np.asarray(self.result.get("gradient"), dtype=np.float64).reshape(-1)
        if not (np.isfinite(energy) and np.isfinite(gradient).all()):
            raise OptimizationError(f"non-finite energy or gradient at step {self.steps}")
        if self.first_energy is None:
            self.first_energy = energy
        return energy, gradient

    def minimise(
        self,
        x0: np.ndarray,
        max_steps: int,
        energy_tolerance: float,
        gradient_tolerance: float,
        max_step: float,
        memory: int,
    ) -> tuple[np.ndarray, float, np.ndarray, bool]:
        """(positions in bohr, energy, gradient, converged) after at most `max_steps`
        evaluations."""
        x = x0.reshape(-1).copy()
        energy, gradient = self.evaluate(x)
        history: list[tuple[np.ndarray, np.ndarray, float]] = []  # (s, y, 1 / y·s)
        while self.steps < max_steps:
            direction = self._direction(gradient, history)
            if direction @ gradient >= 0:  # not downhill: forget the curvature
                history.clear()
                direction = self._direction(gradient, history)
            direction = _capped(direction, max_step)
            x_new = x + direction
            energy_new, gradient_new = self.evaluate(x_new)
            if energy_new > energy + energy_tolerance and self.steps < max_steps:
                history.clear()  # uphill: a quarter of the step, along what is known
                x_new = x + 0.25 * direction
                energy_new, gradient_new = self.evaluate(x_new)
            s, y = x_new - x, gradient_new - gradient
            if (sy := float(s @ y)) > 1e-12:
                history.append((s, y, 1.0 / sy))
                del history[:-memory]
            change = energy_new - energy
            x, energy, gradient = x_new, energy_new, gradient_new
            if abs(change) < energy_tolerance and np.linalg.norm(gradient) < gradient_tolerance:
                return x.reshape(-1, 3), energy, gradient.reshape(-1, 3), True
        return x.reshape(-1, 3), energy, gradient.reshape(-1, 3), False

    @staticmethod
    def _direction(gradient: np.ndarray, history: list) -> np.ndarray:
        """-H⁻¹g by L-BFGS's two-loop recursion; a short steepest-descent step without
        history (0.01 bohr per Eh/bohr, at most a step of 1)."""
        q = gradient.copy()
        alphas = []
        for s, y, rho in reversed(history):
            alpha = rho * (s @ q)
            alphas.append(alpha)
            q -= alpha * y
        if history:
            s, y, _ = history[-1]
            q *= (s @ y) / (y @ y)
        else:
            q *= min(1.0, 0.01 / max(float(np.linalg.norm(gradient)), 1e-12))
        for (s, y, rho), alpha in zip(history, reversed(alphas), strict=True):
            q += s * (alpha - rho * (y @ q))
        return -q


def _capped(step: np.ndarray, max_step: float) -> np.ndarray:
    """The step scaled so that no atom moves more than `max_step`."""
    longest = float(np.linalg.norm(step.reshape(-1, 3), axis=1).max())
    return step * (max_step / longest) if longest > max_step else step
