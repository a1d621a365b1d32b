"""The physics estimates (oodmol.data.featurize.physics) against tblite and dftd4 called
directly, known answers of the harmonic analysis, no target in any feature, and
Δ-learning's baseline (oodmol.data.baseline)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from dftd4.interface import DispersionModel
from mmff_hessian_reference import field_per_displacement_hessian
from rdkit import Chem
from rdkit.Chem import rdForceFieldHelpers as force_fields
from tblite.interface import Calculator

from oodmol.data.baseline import LinearBaseline
from oodmol.data.featurize.base import FeaturizationError, MolInput
from oodmol.data.featurize.graph3d import Graph3D
from oodmol.data.featurize.ionisation import log_d_shift
from oodmol.data.featurize.physics import (
    BOHR,
    COLUMNS,
    HARTREE_KCAL,
    PhysicsEstimates,
    _perceived,
    geometry_molecule,
    mmff_hessian,
)
from oodmol.data.store import FeatureStore
from oodmol.data.table import MoleculeTable

SMILES = ["O", "C", "C#N", "CCO", "c1ccccc1O"]


@pytest.fixture(scope="module")
def geometries() -> dict[str, dict]:
    conformers = Graph3D(seed=0)
    return {smiles: conformers(MolInput(smiles)) for smiles in SMILES}


def estimates(smiles: str, geometry: dict) -> dict[str, float]:
    x = PhysicsEstimates()(MolInput(smiles, geometry["z"], geometry["pos"]))["x"]
    return dict(zip(COLUMNS, x.tolist(), strict=True))


def singlepoint(geometry: dict, solvent: str | None = None):
    calculator = Calculator("GFN2-xTB", geometry["z"], geometry["pos"].astype(float) / BOHR)
    calculator.set("verbosity", 0)
    if solvent:
        calculator.add("alpb-solvation", solvent)
    return calculator.singlepoint()


def test_overlapping_fragments_are_estimated_as_separate_molecules(geometries) -> None:
    """Two ethanols embedded on top of each other (as ETKDG may place a co-crystal's
    copies): estimated apart, they are two ethanols, give or take what 10 Å leaves of
    their interaction."""
    one = geometries["CCO"]
    # RDKit's order for CCO.CCO: both molecules' heavy atoms, then both molecules' hydrogens
    order = [0, 1, 2, 0, 1, 2, *range(3, 9), *range(3, 9)]
    both = MolInput("CCO.CCO", one["z"][order], one["pos"][order])
    pair = dict(zip(COLUMNS, PhysicsEstimates()(both)["x"].tolist(), strict=True))
    single = estimates("CCO", one)
    assert pair["xtb_energy"] == pytest.approx(2 * single["xtb_energy"], abs=2e-3)
    assert pair["atomization"] == pytest.approx(2 * single["atomization"], abs=1.5)
    assert pair["volume"] == pytest.approx(2 * single["volume"], rel=1e-6)
    assert pair["d4_alpha"] == pytest.approx(2 * single["d4_alpha"], rel=0.02)


@pytest.mark.parametrize("smiles", ["O", "CCO", "c1ccccc1O"])
def test_xtb_and_d4_columns_are_theirs(smiles: str, geometries) -> None:
    geometry = geometries[smiles]
    ours = estimates(smiles, geometry)
    gas = singlepoint(geometry)
    assert ours["xtb_energy"] == pytest.approx(gas.get("energy"), abs=1e-7)
    energies, occupied = gas.get("orbital-energies"), gas.get("orbital-occupations") > 1
    assert ours["xtb_homo"] == pytest.approx(energies[occupied].max(), abs=1e-7)
    assert ours["xtb_gap"] == pytest.approx(energies[~occupied].min() - energies[occupied].max())
    assert ours["xtb_dipole"] == pytest.approx(np.linalg.norm(gas.get("dipole")) * 2.541746, 1e-5)
    water = singlepoint(geometry, "water").get("energy") - gas.get("energy")
    octanol = singlepoint(geometry, "octanol").get("energy") - gas.get("energy")
    assert ours["g_solv_water"] == pytest.approx(water * HARTREE_KCAL, abs=1e-3)
    assert ours["log_p"] == pytest.approx((water - octanol) * HARTREE_KCAL / 1.36424, rel=1e-3)
    d4 = DispersionModel(geometry["z"], geometry["pos"].astype(float) / BOHR).get_properties()
    assert ours["d4_alpha"] == pytest.approx(np.sum(d4["polarizabilities"]), rel=1e-6)


def test_log_d_is_log_p_less_the_ionisation_shift_of_the_smiles() -> None:
    """Ethylamine (pKa 10.6) is protonated at pH 7.4: its log D lies the rules' shift
    below ALPB's log P."""
    geometry = Graph3D(seed=0)(MolInput("CCN"))
    ours = estimates("CCN", geometry)
    assert ours["ionisation"] == log_d_shift(Chem.MolFromSmiles("CCN")) > 3.0
    assert ours["log_d"] == pytest.approx(ours["log_p"] - ours["ionisation"], abs=1e-12)


@pytest.mark.parametrize(
    ("smiles", "zpve", "cv"),
    # QM9's B3LYP values of the same molecules (gdb 1, 3, 5): MMFF94's harmonic analysis
    # comes within a few per cent
    [("C", 0.044749, 6.469), ("O", 0.021375, 6.002), ("C#N", 0.016601, 6.278)],
)
def test_harmonic_zpve_and_heat_capacity_come_near_dft(smiles, zpve, cv, geometries) -> None:
    ours = estimates(smiles, geometries[smiles])
    assert ours["zpve"] == pytest.approx(zpve, rel=0.08)
    assert ours["cv"] == pytest.approx(cv, rel=0.05)
    assert ours["n_imaginary"] == 0


@pytest.mark.parametrize("smiles", ["CCO", "c1ccccc1O"])
def test_the_hessian_of_one_field_equals_a_field_per_displacement(smiles, geometries) -> None:
    """Away from the minimum too, where the gradients are large: a field's gradient at
    new positions that read its stale distances would differ by tens of kcal/mol/Å."""
    geometry = geometries[smiles]
    z, pos = geometry["z"].astype(np.int64), geometry["pos"].astype(np.float64)
    mol = geometry_molecule(Chem.MolFromSmiles(smiles), z, pos, 0)
    properties = force_fields.MMFFGetMoleculeProperties(mol)
    x0 = pos.ravel() + np.random.default_rng(0).normal(0.0, 0.05, pos.size)
    field = force_fields.MMFFGetMoleculeForceField(mol, properties)
    fast = mmff_hessian(field, x0, 0.002)
    np.testing.assert_array_equal(fast, field_per_displacement_hessian(mol, properties, x0, 0.002))


@pytest.mark.parametrize("smiles", ["C1=CC2CC1O2", "C1C2CC1C21CO1"])
def test_a_strained_cage_in_another_atom_order_is_estimated_as_in_its_own(smiles) -> None:
    """QM9's geometries list their atoms in another order than the SMILES's; RDKit
    reads a strained cage's close contacts as bonds and can assign them no orders (an
    ether oxygen with three), so the SMILES's molecule is mapped onto the geometry:
    the estimates are the same as in the SMILES's own order."""
    geometry = Graph3D(seed=0)(MolInput(smiles))
    z, pos = geometry["z"], geometry["pos"]
    order = np.roll(np.arange(len(z)), 3)
    with pytest.raises(FeaturizationError, match="no bonds perceived"):
        _perceived(z[order], pos[order], 0)
    own = estimates(smiles, geometry)
    other = estimates(smiles, {"z": z[order], "pos": pos[order]})
    assert other == pytest.approx(own, rel=1e-5, abs=1e-8)


def test_sizes_follow_the_molecule(geometries) -> None:
    small, large = (
        estimates("CCO", geometries["CCO"]),
        estimates("c1ccccc1O", geometries["c1ccccc1O"]),
    )
    assert large["volume"] > small["volume"] > 0 and large["r2"] > small["r2"] > 0
    assert large["mass"] == pytest.approx(94.113, abs=1e-2)
    assert 0.6 < small["density"] < 1.6 and 0.6 < large["density"] < 1.6
    assert math.isfinite(small["hof"]) and small["atomization"] > 0


def test_no_target_reaches_a_feature(tmp_path: Path) -> None:
    """The same molecules under other targets: the same cache (key and content)."""
    smiles = np.array(["O", "CCO", "C#N"])
    ids = np.arange(3)
    tables = [
        MoleculeTable("t", ids, smiles, {"y": np.array(values, dtype=float)})
        for values in ([1.0, 2.0, 3.0], [-5e3, 7.0, np.nan])
    ]
    physics = PhysicsEstimates(conformers=Graph3D(seed=0))
    stores = [
        FeatureStore.build_or_open(physics, t, tmp_path / str(k), n_jobs=1, progress=False)
        for k, t in enumerate(tables)
    ]
    assert stores[0].path.name == stores[1].path.name
    np.testing.assert_array_equal(stores[0].matrix(ids), stores[1].matrix(ids))


def test_the_baseline_is_a_least_squares_line_of_its_column(tmp_path: Path) -> None:
    smiles = np.array(["O", "CCO", "C#N", "C"])
    table = MoleculeTable("t", np.arange(4), smiles, {"y": np.zeros(4)})
    baseline = LinearBaseline(PhysicsEstimates(conformers=Graph3D(seed=0)), "xtb_gap")
    baseline.open(table, tmp_path, progress=False)
    gap = baseline.estimate(np.arange(4))[:, 0]
    y = 3.0 - 2.0 * gap  # a property the estimate explains exactly
    facts = baseline.fit(np.arange(4), y)
    assert (facts["intercept"], *facts["slopes"]) == pytest.approx((3.0, -2.0))
    assert facts["train_rmse"] == pytest.approx(0, abs=1e-9)
    np.testing.assert_allclose(baseline.values(np.arange(4)), y)
    assert baseline.unusable(np.arange(4)) == {}
    with pytest.raises(ValueError, match="names no column"):
        LinearBaseline(PhysicsEstimates(), None)


def test_a_baseline_of_several_columns_fits_each_its_own_slope(tmp_path: Path) -> None:
    smiles = np.array(["O", "CCO", "C#N", "C", "CC(=O)O", "c1ccccc1"])
    table = MoleculeTable("t", np.arange(6), smiles, {"y": np.zeros(6)})
    columns = ["xtb_gap", "xtb_dipole"]
    baseline = LinearBaseline(PhysicsEstimates(conformers=Graph3D(seed=0)), columns)
    baseline.open(table, tmp_path, progress=False)
    x = baseline.estimate(np.arange(6))
    assert x.shape == (6, 2)
    y = 1.0 + 4.0 * x[:, 0] - 0.5 * x[:, 1]  # a property the two explain exactly
    facts = baseline.fit(np.arange(6), y)
    assert facts["columns"] == columns
    assert (facts["intercept"], *facts["slopes"]) == pytest.approx((1.0, 4.0, -0.5))
    np.testing.assert_allclose(baseline.values(np.arange(6)), y)
    with pytest.raises(ValueError, match="a fit of 1 slope"):
        baseline.restore(1.0, [4.0])
    with pytest.raises(ValueError, match="each once"):
        LinearBaseline(PhysicsEstimates(), ["xtb_gap", "xtb_gap"])
    unknown = r"xtb_gapp is not a column of physics \(did you mean xtb_gap"
    with pytest.raises(ValueError, match=unknown):
        LinearBaseline(PhysicsEstimates(), ["xtb_energy", "xtb_gapp"])


def test_a_weighted_baseline_counts_a_molecule_as_often_as_its_weight(tmp_path: Path) -> None:
    """Weighted least squares with integer weights is the plain fit of the molecules
    repeated that many times: the known answer `weighting=tails` leans on."""
    smiles = np.array(["O", "CCO", "C#N", "C", "CC(=O)O"])
    table = MoleculeTable("t", np.arange(5), smiles, {"y": np.zeros(5)})
    baseline = LinearBaseline(PhysicsEstimates(conformers=Graph3D(seed=0)), "xtb_gap")
    baseline.open(table, tmp_path, progress=False)
    y = np.array([0.3, -1.0, 2.5, 0.7, 1.9])  # no line through these
    weights = np.array([1, 3, 1, 2, 1])
    weighted = baseline.fit(np.arange(5), y, weights)
    repeated = np.repeat(np.arange(5), weights)
    plain = baseline.fit(repeated, y[repeated])
    assert weighted["weighted"] and not plain["weighted"]
    assert (weighted["intercept"], *weighted["slopes"]) == pytest.approx(
        (plain["intercept"], *plain["slopes"])
    )
    unweighted = baseline.fit(np.arange(5), y)
    assert unweighted["slopes"][0] != pytest.approx(plain["slopes"][0])
