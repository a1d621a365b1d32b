"""GFN2-xTB geometries (conformers=xtb): tblite's energy and gradient against finite
differences, each library optimiser against the minimum that the L-BFGS it replaced
(tests/references/frozen/xtb_lbfgs_reference.py) reaches, charges, refusals, and the
featuriser's cache identity and resumable build."""

from __future__ import annotations

import functools
import multiprocessing
import os
import signal
import time

import numpy as np
import pytest
from rdkit import Chem
from xtb_lbfgs_reference import LBFGSCartesianXTBOptimizer

from oodmol.data import store as store_module
from oodmol.data.featurize.base import MolInput
from oodmol.data.featurize.conformers import (
    Conformer,
    embed,
    embed_mol,
    optimise_with_force_field,
)
from oodmol.data.featurize.graph3d import Graph3D
from oodmol.data.featurize.xtb import (
    BOHR,
    OptimizationError,
    XTBOptimizer,
    xtb_energy_gradient,
)
from oodmol.data.geometry_checks import aligned_rmsd
from oodmol.data.store import FeatureStore
from oodmol.data.table import MoleculeTable

pytest.importorskip("tblite")

OPTIMIZERS = ("ase-bfgs", "geometric")


def test_gradient_matches_finite_differences_of_the_energy() -> None:
    conformer = embed("CO")  # methanol, 6 atoms
    z, x = conformer.atomic_numbers, conformer.positions.astype(np.float64)
    energy, gradient = xtb_energy_gradient(z, x, accuracy=0.01)
    assert energy == pytest.approx(-8.0, abs=1.0)  # Eh: GFN2-xTB's methanol is near -8.1
    h = 1e-3  # Å
    for atom, axis in [(0, 0), (1, 2), (3, 1), (5, 0)]:
        up, down = x.copy(), x.copy()
        up[atom, axis] += h
        down[atom, axis] -= h
        numeric = (
            xtb_energy_gradient(z, up, accuracy=0.01)[0]
            - xtb_energy_gradient(z, down, accuracy=0.01)[0]
        ) / (2 * h / BOHR)
        assert gradient[atom, axis] == pytest.approx(numeric, abs=2e-5)


def test_the_method_named_is_the_method_computed() -> None:
    conformer = embed("CO")
    z, x = conformer.atomic_numbers, conformer.positions.astype(np.float64)
    gfn2, _ = xtb_energy_gradient(z, x, accuracy=0.01)
    gfn1, _ = xtb_energy_gradient(z, x, method="GFN1-xTB", accuracy=0.01)
    assert abs(gfn1 - gfn2) > 0.1  # Eh: the two parametrisations' methanol differ by 0.74


def test_optimiser_lowers_the_energy_to_a_minimum_and_records_the_change() -> None:
    mol, start = embed_mol("CC(=O)O")
    out = XTBOptimizer()(mol, start)
    energy_start, energy_end = out["energy"]
    assert energy_end < energy_start
    # where it stopped, the gradient is below tolerance (checked anew, not from its record)
    _, gradient = xtb_energy_gradient(start.atomic_numbers, out["pos"].astype(np.float64))
    assert np.linalg.norm(gradient) < 2e-3
    assert out["gradient_norm"][0] < 1e-3
    np.testing.assert_array_equal(out["start_pos"], start.positions)
    heavy = start.atomic_numbers > 1
    assert out["rmsd"][0] == pytest.approx(aligned_rmsd(start.positions[heavy], out["pos"][heavy]))
    assert 0 < out["rmsd"][1] < 0.3  # MMFF94 and GFN2-xTB agree on acetic acid within 0.3 Å
    assert 1 < out["steps"][0] <= 1000
    assert 0 < out["seconds"][0] < 60


@functools.cache
def _lbfgs_minimum(smiles: str) -> tuple[float, np.ndarray]:
    """The energy (Eh) and geometry (Å) at the minimum that the L-BFGS this module used
    before (the frozen copy, hand-written on tblite's gradient alone, no optimiser library)
    reaches with tight criteria: 1e-9 Eh, 1e-5 Eh/bohr."""
    mol, start = embed_mol(Chem.CanonSmiles(smiles))
    out = LBFGSCartesianXTBOptimizer(energy_tolerance=1e-9, gradient_tolerance=1e-5)(mol, start)
    return float(out["energy"][1]), out["pos"]


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
@pytest.mark.parametrize("smiles", ["O=CN", "C[NH3+]", "FC(F)=O", "CC(=O)O"])
def test_each_optimizer_reaches_the_lbfgs_minimum(optimizer: str, smiles: str) -> None:
    """Small rigid molecules, one minimum near MMFF94's: the energy within the energy
    criterion (5e-6 Eh) of the tightly converged L-BFGS minimum, never below it, the same
    geometry, and the criteria hold on tblite's own gradient where it stopped."""
    mol, start = embed_mol(Chem.CanonSmiles(smiles))
    charge = Chem.GetFormalCharge(mol)
    reference, reference_pos = _lbfgs_minimum(smiles)
    out = XTBOptimizer(optimizer=optimizer)(mol, start)
    assert reference - 1e-7 <= out["energy"][1] < reference + 5e-6
    assert aligned_rmsd(out["pos"], reference_pos) < 0.02  # Å, all atoms
    z, pos = start.atomic_numbers, out["pos"].astype(np.float64)
    energy, gradient = xtb_energy_gradient(z, pos, charge)
    assert np.linalg.norm(gradient) < 1.1e-3  # float32 positions: a hair off the float64 ones
    assert energy == pytest.approx(out["energy"][1], abs=1e-6)
    # the L-BFGS at the same (normal) criteria stops at the same energy
    lbfgs = LBFGSCartesianXTBOptimizer()(mol, start)
    assert out["energy"][1] == pytest.approx(lbfgs["energy"][1], abs=5e-6)


class _AccuracySpy:
    """A tblite calculator that notes the SCF accuracy of each of its single points."""

    def __init__(self, calculator, seen: list[float]) -> None:
        self.calculator, self.seen, self.accuracy = calculator, seen, 1.0

    def set(self, name: str, value) -> None:
        if name == "accuracy":
            self.accuracy = value
        self.calculator.set(name, value)

    def update(self, positions) -> None:
        self.calculator.update(positions)

    def singlepoint(self, *args, **kwargs):
        self.seen.append(self.accuracy)
        return self.calculator.singlepoint(*args, **kwargs)


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_steep_steps_run_a_loose_scf_and_the_criteria_read_full_accuracy(
    optimizer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the gradient is steep ASE's BFGS runs a loose SCF; the start, and the last two
    steps whose energies and gradient the criteria read, are at the full accuracy; the
    minimum is the one an optimisation at full accuracy throughout reaches. geomeTRIC,
    which judges its steps by energy changes, runs every SCF at the full accuracy."""
    from oodmol.data.featurize import xtb

    seen: list[float] = []
    make = xtb._calculator
    monkeypatch.setattr(xtb, "_calculator", lambda *a, **k: _AccuracySpy(make(*a, **k), seen))
    mol, start = embed_mol("CCCCO")
    out = XTBOptimizer(optimizer=optimizer)(mol, start)
    assert len(seen) == out["steps"][0]
    if optimizer == "geometric":
        assert set(seen) == {1.0}
        return
    assert seen[0] == 1.0 and seen[-2:] == [1.0, 1.0]
    assert 100.0 in seen
    monkeypatch.setattr(xtb, "_calculator", make)
    fine = XTBOptimizer(optimizer=optimizer, loose_accuracy=1.0)(mol, start)
    assert out["energy"][1] == pytest.approx(fine["energy"][1], abs=5e-6)
    assert aligned_rmsd(out["pos"], fine["pos"]) < 0.05  # Å, all atoms


def _stopped_short() -> tuple[Chem.Mol, Conformer, Conformer]:
    """Butanol, its conformer, and that conformer shaken and marked unconverged."""
    mol, start = embed_mol("CCCCO")
    shaken = start.positions + np.random.default_rng(0).normal(0, 0.08, start.positions.shape)
    short = Conformer(
        start.atomic_numbers, shaken.astype(np.float32), start.method, False, start.fragment
    )
    return mol, start, short


def test_an_unconverged_conformer_is_finished_by_its_force_field_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A conformer whose MMFF94 optimisation stopped short: GFN2-xTB's first step is at
    the MMFF94 minimum, yet the record's start, its energy and the RMSD are the
    conformer's; without `force_field_iterations` it starts at the conformer itself."""
    from oodmol.data.featurize import xtb

    mol, start, short = _stopped_short()
    minimum = Chem.Mol(mol)
    for index, point in enumerate(short.positions.astype(np.float64)):
        minimum.GetConformer().SetAtomPosition(index, point.tolist())
    assert optimise_with_force_field(minimum, 10_000) == ("MMFF", True)
    expected_first = minimum.GetConformer().GetPositions()

    firsts: list[np.ndarray] = []
    evaluate = xtb._Evaluations.__call__

    def noting_first(run, x):
        if run.count == 0:
            firsts.append(np.array(x).reshape(-1, 3) * xtb.BOHR)
        return evaluate(run, x)

    monkeypatch.setattr(xtb._Evaluations, "__call__", noting_first)
    out = XTBOptimizer()(mol, short)
    np.testing.assert_allclose(firsts[0], expected_first, atol=1e-6)
    np.testing.assert_array_equal(out["start_pos"], short.positions)
    energy, _ = xtb_energy_gradient(start.atomic_numbers, short.positions.astype(np.float64))
    assert out["energy"][0] == pytest.approx(energy, abs=1e-6)
    heavy = start.atomic_numbers > 1
    assert out["rmsd"][0] == pytest.approx(aligned_rmsd(short.positions[heavy], out["pos"][heavy]))

    as_is = XTBOptimizer(force_field_iterations=0)(mol, short)
    np.testing.assert_allclose(firsts[1], short.positions, atol=1e-6)
    assert as_is["energy"][0] == pytest.approx(energy, abs=1e-6)
    assert out["energy"][1] == pytest.approx(as_is["energy"][1], abs=5e-6)  # one minimum


class _RestartRefusedAt:
    """A tblite calculator whose SCF started from a guess does not converge at one
    geometry (the conformer), as a start far from the last step's can."""

    def __init__(self, calculator, where: np.ndarray) -> None:
        self.calculator, self.where, self.here = calculator, where, None

    def set(self, name: str, value) -> None:
        self.calculator.set(name, value)

    def update(self, positions) -> None:
        self.here = np.asarray(positions)
        self.calculator.update(positions)

    def singlepoint(self, guess=None, **kwargs):
        if guess is not None and np.allclose(self.here, self.where):
            raise RuntimeError("SCF not converged in 250 cycles")
        return self.calculator.singlepoint(guess, **kwargs)


def test_the_start_energy_falls_back_to_an_scf_from_scratch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The conformer's energy, computed after the optimisation for the record, does not
    cost the molecule its geometry where the restarted SCF fails there."""
    from oodmol.data.featurize import xtb

    mol, start, short = _stopped_short()
    make = xtb._calculator
    where = short.positions.astype(np.float64) / xtb.BOHR
    monkeypatch.setattr(xtb, "_calculator", lambda *a, **k: _RestartRefusedAt(make(*a, **k), where))
    out = XTBOptimizer()(mol, short)
    energy, _ = xtb_energy_gradient(start.atomic_numbers, short.positions.astype(np.float64))
    assert out["energy"][0] == pytest.approx(energy, abs=1e-6)


def test_the_loose_scf_ends_for_good_where_the_gradient_first_flattens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Butane-1,4-diol's gradient grows again after first falling within `loose_gradient`
    (its hydroxyls turn): from that step on every SCF stays at the full accuracy, so no
    BFGS update takes the difference of two gradients computed at different accuracies."""
    from oodmol.data.featurize import xtb

    seen: list[float] = []
    norms: list[float] = []
    make = xtb._calculator
    monkeypatch.setattr(xtb, "_calculator", lambda *a, **k: _AccuracySpy(make(*a, **k), seen))
    evaluate = xtb._Evaluations.__call__

    def noting_norms(run, x):
        energy, gradient = evaluate(run, x)
        norms.append(float(np.linalg.norm(gradient)))
        return energy, gradient

    monkeypatch.setattr(xtb._Evaluations, "__call__", noting_norms)
    settings = XTBOptimizer()
    mol, start = embed_mol("OCCCCO")
    XTBOptimizer()(mol, start)
    flat = next(i for i, norm in enumerate(norms) if norm <= settings.loose_gradient)
    assert 100.0 in seen[1 : flat + 1]  # loose while steep ...
    assert max(norms[flat + 1 :]) > settings.loose_gradient  # ... steep again later ...
    assert set(seen[flat + 1 :]) == {1.0}  # ... and still at the full accuracy


def test_an_unknown_optimizer_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="unknown optimizer 'lbfgs'; give one of ase-bfgs"):
        XTBOptimizer(optimizer="lbfgs")


def test_a_single_atom_is_its_own_minimum() -> None:
    mol, start = embed_mol("[Na+]")
    out = XTBOptimizer()(mol, start)
    np.testing.assert_array_equal(out["pos"], start.positions)
    assert out["steps"][0] == 1 and out["gradient_norm"][0] == 0


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_a_failed_scf_is_refused_with_the_reason(optimizer: str) -> None:
    mol, start = embed_mol("CCO")
    collapsed = Conformer(
        start.atomic_numbers, np.zeros_like(start.positions), start.method, True, start.fragment
    )
    with pytest.raises(OptimizationError, match=f"GFN2-xTB with {optimizer} failed"):
        XTBOptimizer(optimizer=optimizer)(mol, collapsed)


def test_charge_and_unpaired_electrons_reach_tblite() -> None:
    mol, start = embed_mol("C[NH3+]")
    charged = XTBOptimizer()(mol, start)["energy"][0]
    neutral, _ = xtb_energy_gradient(start.atomic_numbers, start.positions, charge=0)
    cation, _ = xtb_energy_gradient(start.atomic_numbers, start.positions, charge=1)
    assert charged == pytest.approx(cation, abs=1e-5)
    assert cation - neutral > 0.05  # Eh: an electron less (the 19-electron neutral is unphysical)
    radical, start = embed_mol("C[CH2]")  # ethyl radical: one unpaired electron
    assert sum(a.GetNumRadicalElectrons() for a in radical.GetAtoms()) == 1
    assert XTBOptimizer()(radical, start)["energy"][1] < 0


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_step_limit_refuses_the_molecule_with_the_reason(optimizer: str) -> None:
    mol, start = embed_mol("CCCCO")
    match = rf"GFN2-xTB optimisation \({optimizer}\) did not converge within 2 steps"
    with pytest.raises(OptimizationError, match=match):
        XTBOptimizer(optimizer=optimizer, max_steps=2)(mol, start)


def test_graph3d_with_xtb_is_keyed_by_its_settings() -> None:
    mmff, xtb = Graph3D(), Graph3D(optimizer=XTBOptimizer(), time_limit=1800)
    assert "optimizer" not in mmff.params()  # the ETKDG + MMFF caches built before stay valid
    assert xtb.params()["optimizer"]["method"] == "GFN2-xTB"
    assert xtb.params()["optimizer"]["tblite"]
    assert xtb.params()["optimizer"]["optimizer"] == "ase-bfgs"  # which optimiser made it
    assert Graph3D(optimizer=XTBOptimizer(max_steps=50)).params() != xtb.params()
    other = Graph3D(optimizer=XTBOptimizer(optimizer="geometric"), time_limit=1800)
    assert other.params() != xtb.params()
    out = xtb(MolInput(Chem.CanonSmiles("OCC")))
    start = mmff(MolInput(Chem.CanonSmiles("OCC")))
    np.testing.assert_array_equal(out["start_pos"], start["pos"])  # the MMFF94 cache's conformer
    np.testing.assert_array_equal(out["z"], start["z"])
    assert not np.array_equal(out["pos"], start["pos"])
    assert set(out) >= {"z", "pos", "fragment", "conformer", "energy", "rmsd", "steps", "seconds"}


def test_graph3d_uses_a_given_geometry_whatever_the_optimizer() -> None:
    z, pos = np.array([8, 1, 1]), np.array([[0, 0, 0], [0.96, 0, 0], [-0.24, 0.93, 0]], np.float32)
    out = Graph3D(optimizer=XTBOptimizer())(MolInput("O", z, pos))
    np.testing.assert_array_equal(out["pos"], pos)


def _xtb_build(cache: str) -> None:
    FeatureStore.build_or_open(Graph3D(optimizer=XTBOptimizer()), _table(), cache, n_jobs=1)


def _table() -> MoleculeTable:
    smiles = [Chem.CanonSmiles(s) for s in ("CCO", "CC(=O)O", "CCN", "C[NH3+]", "OCCO", "CC=O")]
    return MoleculeTable("t", np.arange(len(smiles)), np.array(smiles), {"y": np.zeros(6)})


def test_a_killed_xtb_build_resumes_into_the_cache_an_uninterrupted_one_makes(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.setattr(store_module, "_JOURNAL_SECONDS", 0.0)  # a journal part per molecule
    monkeypatch.setattr("oodmol.parallel.start_method", lambda: "fork")
    full = FeatureStore.build_or_open(
        Graph3D(optimizer=XTBOptimizer()), _table(), tmp_path / "full", n_jobs=1, progress=False
    )
    cache = tmp_path / "cache"
    child = multiprocessing.get_context("fork").Process(target=_xtb_build, args=(str(cache),))
    child.start()
    deadline = time.monotonic() + 120
    while not list(cache.glob("*.journal/*.part")) and time.monotonic() < deadline:
        time.sleep(0.005)
    os.kill(child.pid, signal.SIGKILL)
    child.join()
    done = len(list(cache.glob("*.journal/*.part")))
    assert done >= 1 and not list(cache.glob("*.seal")), "the build was not stopped part-way"
    resumed = FeatureStore.build_or_open(
        Graph3D(optimizer=XTBOptimizer()), _table(), cache, n_jobs=1, progress=False
    )
    assert resumed.path.name == full.path.name  # one key, wherever it is built
    for mol_id in range(6):
        ours, theirs = resumed.get(mol_id), full.get(mol_id)
        assert ours.keys() == theirs.keys()
        for name in ours.keys() - {"seconds"}:  # the CPU time differs from build to build
            np.testing.assert_array_equal(ours[name], theirs[name])
