"""BenchML's 3D representations: the Coulomb matrix's eigenvalues of hand-made molecules,
invariance of all four to rotation, translation and atom order, ASAP's ACSF parameters,
and features read from the conformer cache the 3D models use."""

from __future__ import annotations

import numpy as np
import pytest
from hydra.utils import instantiate

from oodmol.config import compose_config
from oodmol.data.featurize.atomistic import (
    ACSF,
    MBTR,
    SOAP,
    CoulombEigenvalues,
    pool,
    universal_acsf_parameters,
)
from oodmol.data.featurize.base import FeaturizationError, MolInput
from oodmol.data.featurize.graph3d import Graph3D
from oodmol.data.store import FeatureStore
from oodmol.data.table import MoleculeTable

CHNO = ["H", "C", "N", "O"]
# methanol, hand-made: C, O, H (on O), three H (on C); Å
METHANOL_Z = np.array([6, 8, 1, 1, 1, 1])
METHANOL_XYZ = np.array(
    [
        [0.000, 0.000, 0.000],
        [1.420, 0.000, 0.000],
        [1.740, 0.900, 0.000],
        [-0.360, 1.030, 0.000],
        [-0.360, -0.510, 0.890],
        [-0.360, -0.510, -0.890],
    ]
)


def representations() -> list:
    return [
        CoulombEigenvalues(species=CHNO, n_atoms_max=500),
        SOAP(species=CHNO),
        ACSF(species=CHNO),
        MBTR(species=CHNO),
    ]


def test_coulomb_eigenvalues_of_hydrogen_and_water() -> None:
    """H2 at 0.74 Å: M = [[0.5, 1/0.74], [1/0.74, 0.5]], eigenvalues 0.5 ± 1/0.74; water:
    the eigenvalues of M_ii = Z_i^2.4 / 2, M_ij = Z_i Z_j / r_ij, by magnitude."""
    cm = CoulombEigenvalues(species=CHNO, n_atoms_max=500)
    h2 = cm(MolInput("[H][H]", np.array([1, 1]), np.array([[0, 0, 0], [0.74, 0, 0]])))["x"]
    assert h2.shape == (500,) and h2.dtype == np.float32
    np.testing.assert_allclose(h2[:2], [0.5 + 1 / 0.74, 0.5 - 1 / 0.74], rtol=1e-6)
    assert not h2[2:].any()
    z = np.array([8, 1, 1])
    xyz = np.array([[0.0, 0.0, 0.0], [0.7572, 0.5865, 0.0], [-0.7572, 0.5865, 0.0]])
    matrix = np.outer(z, z) / np.maximum(np.linalg.norm(xyz[:, None] - xyz[None], axis=-1), 1e-300)
    np.fill_diagonal(matrix, 0.5 * z**2.4)
    expected = np.linalg.eigvalsh(matrix)
    expected = expected[np.argsort(-np.abs(expected))]
    water = cm(MolInput("O", z, xyz))["x"]
    np.testing.assert_allclose(water[:3], expected, rtol=1e-6)
    assert not water[3:].any()


@pytest.mark.parametrize("featurizer", representations(), ids=lambda f: f.name)
def test_invariant_to_rotation_translation_and_atom_order(featurizer) -> None:
    rng = np.random.default_rng(0)
    rotation, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    order = rng.permutation(len(METHANOL_Z))
    moved = METHANOL_XYZ @ rotation.T + np.array([3.0, -7.0, 11.0])
    x = featurizer(MolInput("CO", METHANOL_Z, METHANOL_XYZ))["x"]
    y = featurizer(MolInput("CO", METHANOL_Z[order], moved[order]))["x"]
    assert x.dtype == np.float32 and np.isfinite(x).all() and np.abs(x).sum() > 0
    np.testing.assert_allclose(y, x, rtol=1e-5, atol=1e-6)
    bent = METHANOL_XYZ.copy()
    bent[2] += [0.0, 0.0, 0.4]  # a different molecule (a geometry) differs
    assert not np.allclose(featurizer(MolInput("CO", METHANOL_Z, bent))["x"], x, atol=1e-4)


def test_pooling_is_a_setting() -> None:
    per_atom = np.arange(6.0).reshape(3, 2)
    np.testing.assert_array_equal(pool(per_atom, "mean"), [2.0, 3.0])
    np.testing.assert_array_equal(pool(per_atom, "sum"), [6.0, 9.0])
    mean = SOAP(species=CHNO)(MolInput("CO", METHANOL_Z, METHANOL_XYZ))["x"]
    total = SOAP(species=CHNO, pooling="sum")(MolInput("CO", METHANOL_Z, METHANOL_XYZ))["x"]
    np.testing.assert_allclose(total, 6 * mean, rtol=1e-5)
    with pytest.raises(ValueError, match="pooling"):
        ACSF(species=CHNO, pooling="max")


def test_acsf_parameters_follow_asaps_heuristic() -> None:
    """CHNO: longest bond O 1.7 Å, shortest H 0.75 Å → cut-off 1.7 × 1.3 × 1.2 = 2.652 →
    2.7 Å, N = int((2.7 − 0.75) / 0.5) = 3 shells at 2.7 (1/3)^(i/3): G2 η = 1/shell²
    (2 significant figures), shifted G2 between shells, G4 η = 10⁻³ (N // 2 = 1 value)."""
    chno = universal_acsf_parameters(("H", "C", "N", "O"))
    assert chno["r_cut"] == 2.7
    assert chno["g2_params"] == [
        [0.14, 0.0],
        [0.29, 0.0],
        [0.59, 0.0],
        [1.2, 0.0],
        [6.3, 0.9],
        [3.0, 1.3],
        [1.5, 1.9],
    ]
    assert chno["g4_params"] == [[0.001, z, s] for z in (1.0, 4.0, 16.0) for s in (1.0, -1.0)]
    assert universal_acsf_parameters(("H", "C", "N", "O", "F"))["r_cut"] == 3.3
    eight = ("H", "C", "N", "O", "F", "S", "Cl", "Br")
    assert universal_acsf_parameters(eight)["r_cut"] == 4.4
    assert universal_acsf_parameters(("H", "C"), scalerange=0.85)["r_cut"] == 2.0


def test_an_element_outside_the_species_refuses_the_molecule() -> None:
    with pytest.raises(FeaturizationError, match=r"atomic numbers \[17\]"):
        SOAP(species=CHNO)(MolInput("CCl", np.array([6, 17]), np.eye(2, 3)))
    with pytest.raises(ValueError, match="no data for"):
        SOAP(species=["C", "U"])
    assert SOAP(species=["O", "H", "C"]).species == ("H", "C", "O")  # by atomic number


def test_features_come_from_the_conformer_cache(tmp_path) -> None:
    """The representation's cache is built on the graph3d cache (built first, in the same
    folder): its vectors are those of the cached conformers; a molecule without a
    conformer, or with an element outside the species, is refused with the reason."""
    smiles = ["CCO", "OC1CC1", "CCCl", "CCCCCCCC"]
    table = MoleculeTable("tiny", np.arange(4), np.array(smiles), {"y": np.zeros(4)})
    conformers = Graph3D(max_atoms=20)  # octane has 26 atoms with its hydrogens
    soap = SOAP(species=CHNO, conformers=conformers)
    store = FeatureStore.build_or_open(soap, table, tmp_path, n_jobs=1, progress=False)
    geometry = FeatureStore.build_or_open(conformers, table, tmp_path, n_jobs=1, progress=False)
    assert sorted(store.failed) == [2, 3]
    assert "atomic numbers [17]" in store.failed[2]
    assert "no conformer in the graph3d cache" in store.failed[3]
    assert "max_atoms" in store.failed[3] or "atoms" in store.failed[3]
    for mol_id in (0, 1):
        atoms = geometry.get(mol_id)
        direct = soap(MolInput(smiles[mol_id], atoms["z"], atoms["pos"]))["x"]
        np.testing.assert_array_equal(store.get(mol_id)["x"], direct)
    assert soap.params()["conformers"]["params"] == conformers.params()


@pytest.mark.parametrize(
    "task, species",
    [
        ("csd10k_density", ("H", "C", "N", "O")),
        ("qm9_homo", ("H", "C", "N", "O", "F")),
        ("lipophilicity", ("H", "C", "N", "O", "F", "S", "Cl", "Br")),
    ],
)
def test_the_representations_take_the_data_sets_elements(task, species) -> None:
    """configs/model/representation: the 3D ones on the data set's elements where its
    source declares them, on the graph3d featuriser's own settings; each builds."""
    graph3d = compose_config("train", [f"task={task}", "model=schnet"]).model.featurizer
    for name in ("coulomb", "soap", "acsf", "mbtr"):
        cfg = compose_config(
            "train", [f"task={task}", "model=krr_rbf", f"model/representation={name}"]
        )
        featurizer = instantiate(cfg.model.featurizer)
        assert featurizer.species == species and cfg.model.name == f"{name}-krr_rbf"
        assert featurizer.conformers.params() == instantiate(graph3d).params()
    for name in ("descriptors", "physchem", "ecfp4", "ecfp4_counts", "ecfp6", "ecfp6_counts"):
        cfg = compose_config(
            "train", [f"task={task}", "model=ridge", f"model/representation={name}"]
        )
        assert instantiate(cfg.model.featurizer)(MolInput("CCO"))["x"].ndim == 1
