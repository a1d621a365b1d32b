"""Physics estimates of every BOOM property, from the molecule alone: a vector per molecule
whose named columns (`COLUMNS`) are cheap quantum-chemical and physical estimates, on the
geometry the 3D models read (the `graph3d` cache: QM9's DFT geometries, the ETKDG +
MMFF94 conformers of the SMILES-only sets, or GFN2-xTB's with `conformers=xtb`).

An estimate is not fitted to any property's values, so it follows a property into the
tail of its distribution, where a model fitted on the training range does not. Each task
names the column that estimates its property (`physics_estimate` in its YAML); the
others are features. Nothing of the data set's targets reaches this featuriser: it sees
the SMILES and the geometry (`MolInput`), as every featuriser does.

- GFN2-xTB single points (tblite; Bannwarth, Ehlert & Grimme 2019): total energy,
  HOMO, LUMO and gap, dipole (Debye), the traceless quadrupole's norm, Mulliken charge
  statistics, the atomisation energy against free xTB atoms and a heat-of-formation
  estimate from it (with the atoms' experimental gas-phase heats of formation), and ALPB
  solvation free energies in water and in octanol (kcal/mol), whose difference estimates
  log P (Ehlert et al. 2021), both restarted from the gas-phase wavefunction; and the
  log D at pH 7.4 that the ionisable groups leave of it (`ionisation`: the shift from
  group pKa rules, `oodmol.data.featurize.ionisation`). A task
  whose property needs no solvation (QM9's) leaves them out (`solvents`), saving two
  of the three SCFs: their columns are NaN then.
- D4 (dftd4; Caldeweyher et al. 2019): the static polarisability (bohr³), the sum of
  the atoms' charge-dependent polarisabilities, and the molecular C6 coefficient.
- Harmonic vibrations from the MMFF94 Hessian at the MMFF94 minimum nearest the
  geometry (forward differences of MMFF94's analytic gradient): the zero-point
  vibrational energy (Eh) and the heat capacity at 298.15 K (cal/(mol K), harmonic
  oscillators plus translation and rigid rotation). A GFN2-xTB Hessian costs 6N
  gradients of tens of milliseconds each, seconds per molecule: over QM9's 130,000
  molecules some 70 CPU-hours, which a 2-core machine cannot spend; MMFF94's costs
  milliseconds, and its frequencies are those a force field fitted to vibrational data
  gives.
- Geometry: the second moment of the xTB electron populations about their centre, a
  nuclear-centred estimate of the electronic spatial extent ⟨R²⟩ (bohr²); the van der
  Waals volume (Zhao, Abraham & Zissimos 2003: Bondi spheres less 5.92 Å³ per bond and
  the rings' corrections) and the crystal density it implies at Kitaigorodskii's typical
  packing coefficient 0.7 (g/cm³); the molar mass.

A molecule of several covalent fragments is estimated with its fragments set apart
(`fragments_apart`), as separate molecules: conformer generators may overlap them.
"""

from __future__ import annotations

import math
from importlib.metadata import version
from typing import ClassVar

import numpy as np
from rdkit import Chem, RDLogger
from rdkit.Chem import Descriptors, rdDetermineBonds, rdMolDescriptors
from rdkit.Chem import rdForceFieldHelpers as force_fields
from threadpoolctl import ThreadpoolController

from oodmol.data.featurize.base import FeaturizationError, Featurizer, MolInput
from oodmol.data.featurize.graph3d import Graph3D
from oodmol.data.featurize.ionisation import log_d_shift
from oodmol.data.featurize.tight_binding import load_dftd4, load_tblite
from oodmol.data.geometry_checks import atoms_in_geometry
from oodmol.data.limits import seconds
from oodmol.errors import InputError

RDLogger.DisableLog("rdApp.*")

FRAGMENT_GAP = 10.0  # Å between fragments (fragments_apart): beyond their interactions

COLUMNS = (
    "xtb_energy", "xtb_homo", "xtb_lumo", "xtb_gap", "xtb_dipole", "xtb_quadrupole",
    "charge_max", "charge_min", "charge_std", "charge_abs_sum",
    "atomization", "hof", "g_solv_water", "g_solv_octanol", "log_p", "ionisation", "log_d",
    "d4_alpha", "d4_c6", "zpve", "cv", "n_imaginary", "r2", "volume", "density", "mass",
    "n_atoms", "n_heavy",
)  # fmt: skip
BOHR = 0.529177210903  # Å
HARTREE_KCAL = 627.5094740631
DEBYE = 2.541746473  # Debye per e·bohr
RT_LN10 = 1.987204259e-3 * 298.15 * math.log(10)  # kcal/mol
R_CAL = 1.987204259  # cal/(mol K)
CM_PER_HARTREE = 219474.6313632
# ħω in cm⁻¹ from a Hessian eigenvalue in kcal/mol/Å²/amu: √(λ · 4184 / N_A / 1e-20 /
# 1.66053907e-27) / (2π c), c in cm/s
WAVENUMBER = math.sqrt(4184 / 6.02214076e23 / 1e-20 / 1.66053906660e-27) / (
    2 * math.pi * 2.99792458e10
)
HC_OVER_K = 1.438776877  # cm K: h c / k_B
PACKING = 0.7  # Kitaigorodskii's typical packing coefficient of organic crystals
AVOGADRO_CM3 = 0.602214076  # g/cm³ per (g/mol per Å³)
# gas-phase heats of formation of the atoms at 298.15 K, kcal/mol (NIST-JANAF/CODATA)
ATOM_HOF = {1: 52.10, 6: 171.29, 7: 112.97, 8: 59.55, 9: 18.97, 16: 66.20, 17: 28.99, 35: 26.74}
# Bondi's van der Waals volumes of the atoms, Å³ (Zhao, Abraham & Zissimos 2003, Table 1)
ATOM_VOLUME = {
    1: 7.24, 5: 17.9, 6: 20.58, 7: 15.60, 8: 14.71, 9: 13.31, 14: 38.79, 15: 24.43,
    16: 24.43, 17: 22.45, 34: 28.73, 35: 26.52, 53: 32.52,
}  # fmt: skip
# unpaired electrons of the free atoms' ground states, for the atomisation energy
ATOM_UNPAIRED = {1: 1, 5: 1, 6: 2, 7: 3, 8: 2, 9: 1, 14: 2, 15: 3, 16: 2, 17: 1, 35: 1, 53: 1}
TEMPERATURE = 298.15
SOLVENTS = ("water", "octanol")  # ALPB's, for the solvation energies and log P
_atom_energies: dict[int, float] = {}  # GFN2-xTB energies of free atoms, per process


class PhysicsEstimates(Featurizer):
    """`x`: float64 [len(COLUMNS)] per molecule (see the module). `conformers`: the
    `Graph3D` featuriser whose cache gives the geometry. A molecule of more than
    `max_atoms` atoms with its hydrogens, of an element without data here, or whose SCF
    does not converge is refused with the reason; one over `time_limit` seconds by the
    cache's build."""

    name: ClassVar[str] = "physics"
    # 3: a molecule in another atom order than its SMILES's whose bond orders RDKit
    # cannot perceive from the geometry is the SMILES's, mapped onto it, not refused;
    # 4: the ionisation shift at pH 7.4 and the log D it leaves of log P
    version: ClassVar[int] = 4
    columns: ClassVar[tuple[str, ...]] = COLUMNS  # the names of `x`'s entries

    def __init__(
        self,
        conformers: Graph3D | None = None,
        max_atoms: int = 200,
        time_limit: float | None = 300.0,
        xtb_accuracy: float = 1.0,
        hessian_step: float = 0.002,
        solvents: list[str] | tuple[str, ...] = SOLVENTS,
        estimates_version: int | None = None,
    ) -> None:
        if estimates_version not in (None, self.version):
            raise InputError(
                f"estimates_version={estimates_version}: this oodmol computes version "
                f"{self.version} of the physics estimates; leave the setting out or give "
                f"{self.version}"
            )
        unknown = sorted(set(solvents) - set(SOLVENTS))
        if unknown:
            raise InputError(
                f"solvents={list(solvents)}: the estimates know {' and '.join(SOLVENTS)}"
            )
        self.solvents = tuple(s for s in SOLVENTS if s in solvents)
        self.conformers = conformers if conformers is not None else Graph3D()
        self.max_atoms = max_atoms
        self.time_limit = seconds(time_limit)
        self.xtb_accuracy = xtb_accuracy
        self.hessian_step = hessian_step

    def params(self) -> dict:
        return {
            "version": self.version,
            "columns": list(COLUMNS),
            "tblite": version("tblite"),
            "dftd4": version("dftd4"),
            "rdkit": version("rdkit"),
            "conformers": {"name": self.conformers.name, "params": self.conformers.params()},
            "max_atoms": self.max_atoms,
            "time_limit": self.time_limit,
            "xtb_accuracy": self.xtb_accuracy,
            "hessian_step": self.hessian_step,
            "solvents": list(self.solvents),
        }

    def built_on(self) -> Graph3D:
        return self.conformers

    def input_from(
        self, smiles: str, arrays: dict[str, np.ndarray] | None, refused: str | None
    ) -> MolInput:
        if arrays is None:
            return MolInput(
                smiles, problem=f"no geometry in the {self.conformers.name} cache ({refused})"
            )
        return MolInput(smiles, arrays["z"], arrays["pos"])

    def __call__(self, mol: MolInput) -> dict[str, np.ndarray]:
        if mol.coords is None or mol.atomic_numbers is None:
            raise FeaturizationError(mol.problem or "no 3D coordinates")
        z = np.asarray(mol.atomic_numbers, dtype=np.int64)
        pos = np.asarray(mol.coords, dtype=np.float64)
        if len(z) > self.max_atoms:
            raise FeaturizationError(f"{len(z)} atoms, more than max_atoms={self.max_atoms}")
        unknown = sorted(set(z.tolist()) - set(ATOM_UNPAIRED))
        if unknown:
            raise FeaturizationError(f"no physics estimates for atomic numbers {unknown}")
        parsed = Chem.MolFromSmiles(mol.smiles)
        if parsed is None:
            raise FeaturizationError(f"RDKit cannot read {mol.smiles!r}")
        charge = Chem.GetFormalCharge(parsed)
        unpaired = sum(a.GetNumRadicalElectrons() for a in parsed.GetAtoms())
        geometry, pos = placed_molecule(parsed, z, pos, charge)
        with _one_thread():
            values = {
                **xtb_estimates(z, pos, charge, unpaired, self.xtb_accuracy, self.solvents),
                **d4_estimates(z, pos, charge),
                **vibrations(geometry, self.hessian_step),
            }
        values.update(size_estimates(parsed, z, pos, values.pop("populations")))
        values["hof"] = sum(ATOM_HOF.get(int(a), math.nan) for a in z) - values["atomization"]
        values["ionisation"] = log_d_shift(parsed)
        values["log_d"] = values["log_p"] - values["ionisation"]
        return {"x": np.array([values[c] for c in COLUMNS], dtype=np.float64)}


def _one_thread():
    """One OpenMP/BLAS thread for tblite and dftd4 in this process. The controller is made
    once, after the libraries are loaded so that it sees their thread pools: finding the
    pools again for every molecule took a tenth of a QM9 molecule's time."""
    global _controller
    if _controller is None:
        load_dftd4()
        load_tblite()
        _controller = ThreadpoolController()
    return _controller.limit(limits=1)


_controller: ThreadpoolController | None = None


def xtb_estimates(
    z: np.ndarray,
    pos: np.ndarray,
    charge: int,
    unpaired: int,
    accuracy: float,
    solvents: tuple[str, ...] = ("water", "octanol"),
) -> dict[str, float]:
    """GFN2-xTB's energy, frontier orbitals, multipoles, charges, atomisation energy and
    ALPB solvation free energies (of `solvents`; NaN for the others) of one geometry (Å)."""
    gas = _singlepoint(z, pos, charge, unpaired, accuracy)
    energy = float(gas.get("energy"))
    energies, occupations = gas.get("orbital-energies"), gas.get("orbital-occupations")
    occupied = occupations > 1.0  # restricted: 2 per occupied orbital (Fermi smearing)
    if not occupied.any() or occupied.all():
        raise FeaturizationError("GFN2-xTB left no occupied or no virtual orbital")
    homo, lumo = float(energies[occupied].max()), float(energies[~occupied].min())
    q = np.asarray(gas.get("charges"), dtype=np.float64)
    xx, xy, yy, xz, yz, zz = np.asarray(gas.get("quadrupole"), dtype=np.float64)
    solvation = dict.fromkeys(SOLVENTS, math.nan)
    for solvent in solvents:
        solvated = _singlepoint(z, pos, charge, unpaired, accuracy, solvent, restart=gas)
        solvation[solvent] = (float(solvated.get("energy")) - energy) * HARTREE_KCAL
    atoms = sum(_atom_energy(int(a), accuracy) for a in z)
    return {
        "xtb_energy": energy,
        "xtb_homo": homo,
        "xtb_lumo": lumo,
        "xtb_gap": lumo - homo,
        "xtb_dipole": float(np.linalg.norm(gas.get("dipole"))) * DEBYE,
        "xtb_quadrupole": math.sqrt(xx**2 + yy**2 + zz**2 + 2 * (xy**2 + xz**2 + yz**2)),
        "charge_max": float(q.max()),
        "charge_min": float(q.min()),
        "charge_std": float(q.std()),
        "charge_abs_sum": float(np.abs(q).sum()),
        "atomization": (atoms - energy) * HARTREE_KCAL,
        "g_solv_water": solvation["water"],
        "g_solv_octanol": solvation["octanol"],
        "log_p": (solvation["water"] - solvation["octanol"]) / RT_LN10,
        "populations": z - q,  # electrons per atom, for the spatial extent
    }


def _singlepoint(z, pos, charge, unpaired, accuracy, solvent=None, restart=None):
    calculator = load_tblite().Calculator(  # imported in the workers that compute
        "GFN2-xTB",
        np.asarray(z, dtype=np.int32),
        np.asarray(pos, dtype=np.float64) / BOHR,
        charge=float(charge),
        uhf=int(unpaired),
    )
    calculator.set("verbosity", 0)
    calculator.set("accuracy", accuracy)
    if solvent is not None:
        calculator.add("alpb-solvation", solvent)
    try:
        if restart is None:
            return calculator.singlepoint()
        return calculator.singlepoint(restart, copy=True)  # the gas phase's stays as it was
    except RuntimeError as error:
        where = f" in {solvent}" if solvent else ""
        raise FeaturizationError(f"GFN2-xTB failed{where}: {str(error)[:160]}") from None


def _atom_energy(number: int, accuracy: float) -> float:
    """The GFN2-xTB energy of a free atom in its ground state's spin, once per process."""
    if number not in _atom_energies:
        result = _singlepoint(
            np.array([number]), np.zeros((1, 3)), 0, ATOM_UNPAIRED[number], accuracy
        )
        _atom_energies[number] = float(result.get("energy"))
    return _atom_energies[number]


def d4_estimates(z: np.ndarray, pos: np.ndarray, charge: int) -> dict[str, float]:
    """D4's static polarisability (bohr³) and molecular C6 (Eh bohr⁶)."""
    try:
        model = load_dftd4().DispersionModel(
            np.asarray(z, dtype=np.int32), np.asarray(pos) / BOHR, charge=float(charge)
        )
        properties = model.get_properties()
    except RuntimeError as error:
        raise FeaturizationError(f"D4 failed: {str(error)[:160]}") from None
    return {
        "d4_alpha": float(np.sum(properties["polarizabilities"])),
        "d4_c6": float(np.sum(properties["c6 coefficients"])),
    }


def geometry_molecule(parsed: Chem.Mol, z: np.ndarray, pos: np.ndarray, charge: int) -> Chem.Mol:
    """An RDKit molecule in the geometry's atom order with the geometry as its conformer:
    the SMILES's own with its hydrogens where the elements line up (the conformers of
    the SMILES-only sets), else perceived from the geometry (QM9's atom order)."""
    with_h = Chem.AddHs(parsed)
    if [a.GetAtomicNum() for a in with_h.GetAtoms()] != z.tolist():
        with_h = _in_geometry_order(with_h, z, pos, charge)
    conformer = Chem.Conformer(len(z))
    for i, xyz in enumerate(pos):
        conformer.SetAtomPosition(i, xyz.tolist())
    with_h.RemoveAllConformers()
    with_h.AddConformer(conformer, assignId=True)
    return with_h


def placed_molecule(
    parsed: Chem.Mol, z: np.ndarray, pos: np.ndarray, charge: int
) -> tuple[Chem.Mol, np.ndarray]:
    """The molecule the estimates are computed on (`geometry_molecule`), its covalent
    fragments set apart (`fragments_apart`), and its coordinates."""
    geometry = geometry_molecule(parsed, z, pos, charge)
    apart = fragments_apart(geometry, pos)
    if apart is pos:
        return geometry, pos
    return geometry_molecule(parsed, z, apart, charge), apart


def fragments_apart(mol: Chem.Mol, pos: np.ndarray, gap: float = FRAGMENT_GAP) -> np.ndarray:
    """The geometry with the molecule's covalent fragments (a salt's ions, a co-crystal's
    molecules) `gap` Å apart along x, each as it was; `pos` itself for one fragment.
    ETKDG embeds fragments independently and may put them on top of each other (two
    copies of one molecule at the same place): GFN2-xTB's energy of that is thousands of
    Eh above the separate molecules', and a volume counts the overlap once."""
    fragments = Chem.GetMolFrags(mol)
    if len(fragments) == 1:
        return pos
    apart = np.empty_like(pos)
    edge = None
    for atoms in fragments:
        atoms = list(atoms)
        own = pos[atoms] - pos[atoms].mean(axis=0)
        shift = 0.0 if edge is None else edge + gap - own[:, 0].min()
        apart[atoms] = own + np.array([shift, 0.0, 0.0])
        edge = shift + own[:, 0].max()
    return apart


def _in_geometry_order(with_h: Chem.Mol, z: np.ndarray, pos: np.ndarray, charge: int) -> Chem.Mol:
    """The molecule in the geometry's atom order (QM9's): its bonds and their orders
    perceived from the geometry, or, where RDKit cannot assign orders to what it
    perceives (a strained cage's close contacts read as bonds: an ether oxygen with
    three), the SMILES's own molecule, every bond of which the geometry shows."""
    try:
        return _perceived(z, pos, charge)
    except FeaturizationError as error:
        order = atoms_in_geometry(with_h, z, pos)
        if order is None:
            raise FeaturizationError(
                f"{error}; nor does the geometry show every bond of the SMILES"
            ) from None
        return Chem.RenumberAtoms(with_h, order)


def _perceived(z: np.ndarray, pos: np.ndarray, charge: int) -> Chem.Mol:
    block = f"{len(z)}\n\n" + "".join(
        f"{Chem.GetPeriodicTable().GetElementSymbol(int(a))} {x:.6f} {y:.6f} {w:.6f}\n"
        for a, (x, y, w) in zip(z, pos, strict=True)
    )
    mol = Chem.MolFromXYZBlock(block)
    try:
        rdDetermineBonds.DetermineBonds(mol, charge=charge)
    except ValueError as error:
        raise FeaturizationError(f"no bonds perceived from the geometry: {error}") from None
    return mol


def vibrations(mol: Chem.Mol, step: float) -> dict[str, float]:
    """ZPVE (Eh) and heat capacity at 298.15 K (cal/(mol K)) from the MMFF94 harmonic
    frequencies at the MMFF94 minimum nearest the geometry, the Hessian being the forward
    difference of MMFF94's analytic gradient (`mmff_hessian`)."""
    field, _, x0 = mmff_minimum(mol)
    n = len(x0) // 3
    hessian = mmff_hessian(field, x0, step)
    hessian = (hessian + hessian.T) / 2
    masses = np.repeat([a.GetMass() for a in mol.GetAtoms()], 3)
    eigenvalues = np.sort(np.linalg.eigvalsh(hessian / np.sqrt(np.outer(masses, masses))))
    linear = n == 2 or (n > 2 and _is_linear(x0.reshape(n, 3)))
    vibrating = 3 * n - (5 if linear else 6) if n > 1 else 0
    modes = eigenvalues[len(eigenvalues) - vibrating :] if vibrating else eigenvalues[:0]
    wavenumbers = np.sqrt(np.clip(modes, 0, None)) * WAVENUMBER
    wavenumbers = wavenumbers[wavenumbers > 1.0]
    x = HC_OVER_K * wavenumbers / TEMPERATURE
    vibration = float(np.sum(x**2 * np.exp(x) / np.expm1(x) ** 2))
    rotation = (1.0 if linear else 1.5) if n > 1 else 0.0
    return {
        "zpve": float(wavenumbers.sum()) / 2 / CM_PER_HARTREE,
        "cv": R_CAL * (vibration + 1.5 + rotation),
        "n_imaginary": float((modes < -1e-3).sum()),
    }


def mmff_minimum(mol: Chem.Mol) -> tuple:
    """MMFF94's force field of `mol`, its parameters and the flat coordinates (Å) of the
    minimum nearest `mol`'s conformer, to which the conformer is moved."""
    properties = force_fields.MMFFGetMoleculeProperties(mol)
    if properties is None:
        raise FeaturizationError("MMFF94 has no parameters for this molecule")
    field = force_fields.MMFFGetMoleculeForceField(mol, properties)
    field.Initialize()
    field.Minimize(maxIts=2000)
    return field, properties, np.asarray(field.Positions(), dtype=np.float64)


def mmff_hessian(field, x0: np.ndarray, step: float) -> np.ndarray:
    """The forward-difference Hessian (kcal/mol/Å², not yet symmetrised) of an RDKit
    force field at `x0` (flat, Å). Every gradient is the one field's: `CalcGrad` at given
    positions reads the interatomic distances the field cached at its last energy, so the
    energy at the same positions comes first. Building a field per displacement instead
    gives the same numbers at five times the cost: it was most of a molecule's time."""

    def gradient(x: np.ndarray) -> np.ndarray:
        positions = x.tolist()
        field.CalcEnergy(positions)
        return np.asarray(field.CalcGrad(positions))

    at_minimum = gradient(x0)
    hessian = np.empty((len(x0), len(x0)))
    for k in range(len(x0)):
        shifted = x0.copy()
        shifted[k] += step
        hessian[k] = (gradient(shifted) - at_minimum) / step
    return hessian


def _is_linear(xyz: np.ndarray) -> bool:
    centred = xyz - xyz.mean(axis=0)
    singular = np.linalg.svd(centred, compute_uv=False)
    return singular[1] < 1e-3 * max(singular[0], 1e-12)


def size_estimates(
    parsed: Chem.Mol, z: np.ndarray, pos: np.ndarray, populations: np.ndarray
) -> dict[str, float]:
    """⟨R²⟩ from the xTB populations, the van der Waals volume, the density it implies
    at the typical packing coefficient, the molar mass and the atom counts."""
    bohr = pos / BOHR
    centre = (populations[:, None] * bohr).sum(axis=0) / populations.sum()
    r2 = float((populations * ((bohr - centre) ** 2).sum(axis=1)).sum())
    with_h = Chem.AddHs(parsed)
    rings = (
        rdMolDescriptors.CalcNumAromaticRings(with_h),
        rdMolDescriptors.CalcNumAliphaticRings(with_h),
    )
    volume = (
        sum(ATOM_VOLUME[int(a)] for a in z)
        - 5.92 * with_h.GetNumBonds()
        - 14.7 * rings[0]
        - 3.8 * rings[1]
    )
    mass = Descriptors.MolWt(with_h)
    return {
        "r2": r2,
        "volume": volume,
        "density": mass * PACKING / (AVOGADRO_CM3 * volume),
        "mass": mass,
        "n_atoms": float(len(z)),
        "n_heavy": float((z > 1).sum()),
    }
