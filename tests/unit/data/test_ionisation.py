"""The group pKa rules (oodmol.data.featurize.ionisation) against measured pKa of drugs and
simple amines and acids, and the log D shift they give against Henderson–Hasselbalch
worked by hand."""

from __future__ import annotations

import math

import pytest
from rdkit import Chem

from oodmol.data.featurize.ionisation import (
    ION_PAIR_DROP,
    acid_pkas,
    base_pkas,
    log_d_shift,
)

# measured aqueous pKa (Perrin's and Avdeef's tables); the rules are within 0.5 of each
ACIDS = {
    "CC(=O)O": 4.76,  # acetic acid
    "OC(=O)c1ccccc1": 4.20,  # benzoic acid
    "CC(C)Cc1ccc(cc1)C(C)C(=O)O": 4.45,  # ibuprofen
    "c1ccc(cc1)-c1nn[nH]n1": 4.5,  # 5-phenyltetrazole
    "Nc1ccc(cc1)S(=O)(=O)Nc1ncccn1": 6.5,  # sulfadiazine
    "CS(=O)(=O)O": -1.9,  # methanesulfonic acid: far below pH 7.4 either way
}
BASES = {
    "CC(C)NCC(O)COc1cccc2ccccc12": 9.5,  # propranolol
    "NCc1ccccc1": 9.34,  # benzylamine
    "CN1CCOCC1": 7.4,  # N-methylmorpholine
    "C1CCNCC1": 11.1,  # piperidine
    "Cn1ccnc1": 7.0,  # 1-methylimidazole
    "NC(=N)c1ccccc1": 11.6,  # benzamidine
    "NCC(F)(F)F": 5.7,  # 2,2,2-trifluoroethylamine
    "CN(C)CCOC(c1ccccc1)c1ccccc1": 9.0,  # diphenhydramine
}
NEUTRAL = ["Oc1ccccc1", "c1ccncc1", "CC(=O)Nc1ccccc1", "CCOC(C)=O", "Nc1ccccc1"]


@pytest.mark.parametrize("smiles", ACIDS)
def test_an_acid_s_pka_is_near_its_measured_one(smiles: str) -> None:
    pkas = acid_pkas(Chem.MolFromSmiles(smiles))
    assert pkas and abs(pkas[0] - ACIDS[smiles]) <= (1.0 if pkas[0] < 2 else 0.5)
    assert base_pkas(Chem.MolFromSmiles(smiles)) == []


@pytest.mark.parametrize("smiles", BASES)
def test_a_base_s_pka_is_near_its_measured_one(smiles: str) -> None:
    pkas = base_pkas(Chem.MolFromSmiles(smiles))
    assert pkas and abs(pkas[-1] - BASES[smiles]) <= 0.5
    assert acid_pkas(Chem.MolFromSmiles(smiles)) == []


@pytest.mark.parametrize("smiles", NEUTRAL)
def test_groups_far_from_ph_7_4_leave_log_p_as_it_is(smiles: str) -> None:
    assert log_d_shift(Chem.MolFromSmiles(smiles)) == 0.0


def test_the_shift_is_henderson_hasselbalch_with_the_ion_pairs_partitioning() -> None:
    """Benzoic acid (rule pKa 4.2) at pH 7.4: neutral fraction 1 / (1 + 10^3.2); the
    anion partitions 10^-3.5 as well as the neutral acid."""
    neutral = 1 / (1 + 10**3.2)
    expected = -math.log10(neutral + (1 - neutral) * 10**ION_PAIR_DROP)
    assert log_d_shift(Chem.MolFromSmiles("OC(=O)c1ccccc1")) == pytest.approx(expected)
    assert expected == pytest.approx(3.02, abs=0.01)
    # at pH 2.2, two units below the pKa, it is nearly all neutral
    assert log_d_shift(Chem.MolFromSmiles("OC(=O)c1ccccc1"), ph=2.2) == pytest.approx(
        -math.log10(1 / 1.01 + (0.01 / 1.01) * 10**ION_PAIR_DROP)
    )


def test_a_zwitterion_is_ionised_twice_and_a_quaternary_ammonium_always() -> None:
    """6-Aminohexanoic acid's acid (pKa 4.8) and amine (10.6) are both ionised at pH 7.4,
    a neutral fraction of 1 / ((1 + 10^2.6) (1 + 10^3.2)): its shift is the ion pairs'
    cap; tetramethylammonium has no neutral form at any pH."""
    cap = -ION_PAIR_DROP
    neutral = 1 / ((1 + 10**2.6) * (1 + 10**3.2))
    expected = -math.log10(neutral + (1 - neutral) * 10**ION_PAIR_DROP)
    assert log_d_shift(Chem.MolFromSmiles("NCCCCCC(=O)O")) == pytest.approx(expected)
    assert expected == pytest.approx(cap, abs=5e-3)
    assert log_d_shift(Chem.MolFromSmiles("C[N+](C)(C)C")) == pytest.approx(cap)
    assert log_d_shift(Chem.MolFromSmiles("C[N+](C)(C)C"), ph=14.0) == pytest.approx(cap)
