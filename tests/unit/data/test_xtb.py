"""GFN2-xTB geometries (conformers=xtb): tblite's energy and gradient against finite
differences, the optimiser, charges, and the featuriser's cache identity."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

import numpy as np
import pytest
from rdkit import Chem

from oodmol.data import store as store_module
from oodmol.data.featurize.base import MolInput
from oodmol.data.featurize.conformers import embed, embed_mol
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


def test_step_limit_refuses_the_molecule_with_the_reason() -> None:
    mol, start = embed_mol("CCCCO")
    with pytest.raises(OptimizationError, match="did not converge within 2 steps"):
        XTBOptimizer(max_steps=2)(mol, start)


def test_graph3d_with_xtb_is_keyed_by_its_settings() -> None:
    mmff, xtb = Graph3D(), Graph3D(optimizer=XTBOptimizer(), time_limit=1800)
    assert "optimizer" not in mmff.params()  # the ETKDG + MMFF caches built before stay valid
    assert xtb.params()["optimizer"]["method"] == "GFN2-xTB"
    assert xtb.params()["optimizer"]["tblite"]
    assert Graph3D(optimizer=XTBOptimizer(max_steps=50)).params() != xtb.params()
    out = xtb(MolInput(Chem.CanonSmiles("OCC")))
    start = mmff(MolInput(Chem.CanonSmiles("OCC")))
    np.testing.assert_array_equal(out["start_pos"], start["pos"])  # the MMFF94 cache's conformer
    np.testing.assert_array_equal(out["z"], start["z"])
    assert not np.array_equal(out["pos"], start["pos"])
    assert set(out) >= {"z", "pos", "fragment", "conformer", "energy", "rmsd", "steps"}


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
        for name in ours:
            np.testing.assert_array_equal(ours[name], theirs[name])
