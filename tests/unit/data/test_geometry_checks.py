"""The GEOM-drugs checks of a geometry: its bond graph against the molecule's (a fractured
molecule, a formed bond, a charged molecule, a geometry in another atom order), the
aromatic-aware valency table on the paper's examples, and a cache's check report."""

from __future__ import annotations

import numpy as np
import pytest
from rdkit import Chem

from oodmol.data.featurize.base import FeaturizationError, Featurizer, MolInput
from oodmol.data.featurize.conformers import embed
from oodmol.data.geometry_checks import (
    AROMATIC,
    BOND_BROKEN,
    BOND_FORMED,
    FRAGMENTS,
    GRAPH_DIFFERS,
    NO_GEOMETRY,
    VALENCE,
    aligned_rmsd,
    check_geometry,
    check_store,
    described,
    valence_problems,
)
from oodmol.data.store import FeatureStore
from oodmol.data.table import MoleculeTable


def reasons(problems) -> set[str]:
    return {p.reason for p in problems}


def conformer(smiles: str) -> tuple[str, np.ndarray, np.ndarray]:
    smiles = Chem.CanonSmiles(smiles)
    c = embed(smiles)
    return smiles, c.atomic_numbers, c.positions.astype(np.float64)


@pytest.mark.parametrize(
    "smiles",
    [
        "CCO",
        "c1ccncc1",  # pyridine: N (2 aromatic, 0)
        "c1cc[nH]c1",  # pyrrole: NH (2 aromatic, 1)
        "O=[N+]([O-])c1ccccc1",  # nitrobenzene: N+ (0, 4), O- (0, 1)
        "CC(=O)[O-]",  # acetate, charge -1
        "C[NH3+]",  # methylammonium, charge +1
        "[NH3+]CC(=O)[O-]",  # glycine zwitterion
        "CC1(C)CCCC(C)(C)N1[O]",  # TEMPO: a nitroxide radical, O• (0, 1 + 1)
        "O=c1cc[nH]cc1",  # 4-pyridone: C (2 aromatic, 2)
    ],
)
def test_a_good_geometry_passes_charged_and_aromatic_ones_too(smiles: str) -> None:
    assert check_geometry(*conformer(smiles)) == []


def test_fragments_laid_on_top_of_each_other_are_named_in_one_short_line() -> None:
    """ETKDG can place the two copies of a co-crystal at one spot: every bond across them
    is formed and every atom's valence is outside the table, which the report names once
    per reason, its first few details and how many more."""
    smiles, z, pos = conformer("CCO.CCO")
    first, second = Chem.GetMolFrags(Chem.AddHs(Chem.MolFromSmiles(smiles)))
    assert [z[i] for i in first] == [z[i] for i in second]
    pos[list(second)] = pos[list(first)]
    problems = check_geometry(smiles, z, pos)
    line = described(problems)
    assert line.count(BOND_FORMED) == 1 and line.count(VALENCE) == 1, line
    assert len(problems) > 10 and " more" in line and len(line) < 400, line


def test_fractured_molecule_fails_naming_the_broken_bond() -> None:
    smiles, z, pos = conformer("CCO")  # atoms C0 C1 O2, then hydrogens
    oxygen_side = [2, 8]  # O2 and its hydrogen
    pos[oxygen_side] += np.array([4.0, 0.0, 0.0])  # pull the OH 4 Å away
    problems = check_geometry(smiles, z, pos)
    assert reasons(problems) >= {BOND_BROKEN, FRAGMENTS, VALENCE}
    broken = next(p for p in problems if p.reason == BOND_BROKEN)
    assert broken.detail == "C1-O2"
    assert next(p for p in problems if p.reason == FRAGMENTS).detail == (
        "2 fragments, 1 in the molecule"
    )


def test_a_hydrogen_moved_onto_another_atom_is_a_broken_and_a_formed_bond() -> None:
    smiles, z, pos = conformer("OCCO")
    mol = Chem.AddHs(Chem.MolFromSmiles(smiles))
    oxygens = [a.GetIdx() for a in mol.GetAtoms() if a.GetSymbol() == "O"]
    hydrogen = next(
        n.GetIdx() for n in mol.GetAtomWithIdx(oxygens[0]).GetNeighbors() if n.GetAtomicNum() == 1
    )
    direction = pos[hydrogen] - pos[oxygens[0]]
    pos[hydrogen] = pos[oxygens[1]] + direction / np.linalg.norm(direction) * 0.97
    problems = check_geometry(smiles, z, pos)
    assert reasons(problems) == {BOND_BROKEN, BOND_FORMED, VALENCE}
    # the oxygen that lost its hydrogen has valence 1, the other 3: both named
    valences = [p.detail for p in problems if p.reason == VALENCE]
    assert any("valence 1" in d for d in valences) and any("valence 3" in d for d in valences)


def test_a_charged_molecule_is_checked_with_its_charges() -> None:
    smiles, z, pos = conformer("C[NH3+]")
    assert check_geometry(smiles, z, pos) == []
    # the same atoms read as a neutral molecule: N with four bonds is outside the table
    numbers = [7, 6, 1, 1, 1, 1, 1, 1]
    bonds = [(0, 1, 1), (0, 2, 1), (0, 3, 1), (0, 4, 1), (1, 5, 1), (1, 6, 1), (1, 7, 1)]
    assert valence_problems(numbers, [1, 0, 0, 0, 0, 0, 0, 0], bonds) == []
    neutral = valence_problems(numbers, [0] * 8, bonds)
    assert [p.detail for p in neutral] == [
        "N0 charge +0 with 0 aromatic bonds and valence 4 otherwise"
    ]


def test_a_given_geometry_in_its_own_atom_order_is_compared_as_a_graph() -> None:
    smiles, z, pos = conformer("CC(=O)N")
    order = np.random.default_rng(0).permutation(len(z))  # QM9's xyz order is its own
    assert check_geometry(smiles, z[order], pos[order]) == []
    stretched = pos.copy()
    stretched[1] += np.array([0.0, 0.0, 3.0])  # the carbonyl carbon leaves
    problems = check_geometry(smiles, z[order], stretched[order])
    assert reasons(problems) == {GRAPH_DIFFERS}


def legacy_midi_stable(numbers, charges, bonds) -> bool:
    """MiDi's check as the paper reproduced it (bug_example/midi_molecule_stability.py):
    bond orders summed into an integer (aromatic 1.5 truncated) against its old table."""
    allowed = {"H": {0: [1]}, "C": {0: [3, 4], 1: [3], -1: [3]}, "N": {0: [2, 3], 1: [2, 3, 4]}}
    valence = [0.0] * len(numbers)
    for i, j, order in bonds:
        valence[i] += order
        valence[j] += order
    symbols = {1: "H", 6: "C", 7: "N"}
    return all(
        int(v) in allowed[symbols[z]].get(q, allowed[symbols[z]][0])
        for z, q, v in zip(numbers, charges, valence, strict=True)
    )


def test_the_papers_examples_fail_the_table_that_midis_passed() -> None:
    # CH2-N-CH2: a neutral N with two bonds and carbons with three (bug_example/)
    numbers = [6, 1, 1, 7, 6, 1, 1]
    bonds = [(0, 1, 1), (0, 2, 1), (0, 3, 1), (3, 4, 1), (4, 5, 1), (4, 6, 1)]
    assert legacy_midi_stable(numbers, [0] * 7, bonds)
    problems = valence_problems(numbers, [0] * 7, bonds)
    assert [p.detail.split(" with")[0] for p in problems] == [
        "C0 charge +0",
        "N3 charge +0",
        "C4 charge +0",
    ]
    # CH3:CH3, the C-C bond marked aromatic: 3 + 1.5 truncated to 4 passed MiDi's table
    numbers = [6, 1, 1, 1, 6, 1, 1, 1]
    bonds = [(0, 1, 1), (0, 2, 1), (0, 3, 1), (4, 5, 1), (4, 6, 1), (4, 7, 1), (0, 4, AROMATIC)]
    assert legacy_midi_stable(numbers, [0] * 8, bonds)
    problems = valence_problems(numbers, [0] * 8, bonds)
    assert [p.detail for p in problems] == [
        "C0 charge +0 with 1 aromatic bonds and valence 3 otherwise",
        "C4 charge +0 with 1 aromatic bonds and valence 3 otherwise",
    ]
    # benzene's carbons: (2 aromatic, 1 hydrogen), in the table
    ring = [(i, (i + 1) % 6, AROMATIC) for i in range(6)] + [(i, 6 + i, 1) for i in range(6)]
    assert valence_problems([6] * 6 + [1] * 6, [0] * 12, ring) == []


def test_an_element_or_charge_outside_the_table_is_named() -> None:
    problems = valence_problems([8, 1, 1, 1], [1, 0, 0, 0], [(0, 1, 1), (0, 2, 1), (0, 3, 1)])
    assert problems == []  # hydronium: O+ (0, 3)
    problems = valence_problems([54], [0], [])
    assert [p.detail for p in problems] == ["no entry for Xe charge +0"]


def test_aligned_rmsd_ignores_rotation_and_translation() -> None:
    x = np.random.default_rng(1).normal(size=(12, 3))
    angle = 0.7
    rotation = np.array(
        [[np.cos(angle), -np.sin(angle), 0], [np.sin(angle), np.cos(angle), 0], [0, 0, 1]]
    )
    assert aligned_rmsd(x, x @ rotation.T + 5.0) == pytest.approx(0.0, abs=1e-10)
    moved = x.copy()
    moved[0] += np.array([0.0, 0.0, np.sqrt(12.0)])  # one atom 3.46 Å off: RMSD below 1
    assert 0.5 < aligned_rmsd(x, moved) < 1.0


class BrokenGeometry(Featurizer):
    """ETKDG + MMFF conformers, but propanol's OH pulled away and one molecule refused."""

    name = "broken"

    def params(self) -> dict:
        return {}

    def __call__(self, mol: MolInput) -> dict[str, np.ndarray]:
        if mol.smiles == "CCCC":
            raise FeaturizationError("no conformer today")
        c = embed(mol.smiles)
        pos = c.positions.copy()
        if mol.smiles == "CCCO":
            pos[[3, 11]] += 5.0
        n = len(c.atomic_numbers)
        return {
            "z": c.atomic_numbers,
            "pos": pos,
            "rmsd": np.array([0.1, 0.2]),
            "energy": np.array([-1.0, -1.0 - 2 / 627.5094740631]),
            "steps": np.array([n], dtype=np.int32),
            "seconds": np.array([n / 10]),
            "fragment": np.zeros(n, np.int64),
        }


def test_check_report_of_a_cache_counts_and_names_every_failure(tmp_path) -> None:
    smiles = np.array(["CCO", "CCCO", "CCCC", "c1ccccc1"])
    table = MoleculeTable("t", np.arange(4) + 10, smiles, {"y": np.zeros(4)})
    store = FeatureStore.build_or_open(BrokenGeometry(), table, tmp_path, n_jobs=1, progress=False)
    report = check_store(store, table, "broken", progress=False, n_jobs=1)
    assert report.n_passed == 2 and sorted(report.failed) == [11, 12]
    assert report.failed[12] == f"{NO_GEOMETRY}: CCCC: no conformer today"
    assert report.failed[11].startswith(f"{BOND_BROKEN}: C2-O3")
    assert report.reasons[NO_GEOMETRY] == 1 and report.reasons[BOND_BROKEN] == 1
    summary = report.summary()
    assert summary["median_energy_change_kcal"] == pytest.approx(-2.0)
    assert summary["median_rmsd_all"] == pytest.approx(0.2)
    # the optimiser's cost of the three with a geometry: 9, 12 and 12 atoms here
    assert summary["mean_steps"] == pytest.approx(11.0) and summary["median_steps"] == 12
    assert summary["mean_cpu_seconds"] == pytest.approx(1.1)
    assert summary["cpu_hours"] == pytest.approx(3.3 / 3600)
    # cached beside the store: the next call reads it
    assert (tmp_path / f"{store.path.name}.checks.json").is_file()
    again = check_store(store, table, "broken", progress=False, n_jobs=1)
    assert again.failed == report.failed and again.costs == report.costs
    csv = report.write_csv(tmp_path / "report.csv", table).read_text().splitlines()
    assert csv[0] == (
        "mol_id,smiles,passed,problem,rmsd_heavy,rmsd_all,energy_change_kcal,steps,cpu_seconds"
    )
    assert csv[1].startswith('10,CCO,1,"",0.1,0.2,-2.0') and csv[1].endswith(",9,0.9")
    assert csv[3].endswith(',"no geometry: CCCC: no conformer today",,,,,')


def test_check_report_of_a_subset_checks_its_molecules_alone(tmp_path) -> None:
    """A run's subset: its molecules are built and checked, and no report of the whole
    cache is written beside it."""
    smiles = np.array(["CCO", "CCCO", "CCCC", "c1ccccc1"])
    table = MoleculeTable("t", np.arange(4) + 10, smiles, {"y": np.zeros(4)})
    ids = np.array([11, 13])
    store = FeatureStore.build_or_open(
        BrokenGeometry(), table, tmp_path, n_jobs=1, progress=False, mol_ids=ids
    )
    report = check_store(store, table, "broken", progress=False, n_jobs=1, mol_ids=ids)
    assert (report.n_molecules, report.n_passed, sorted(report.failed)) == (2, 1, [11])
    assert report.failed[11].startswith(f"{BOND_BROKEN}: C2-O3")
    assert not list(tmp_path.glob("*.checks.json"))
