import math

import numpy as np
import pytest
from rdkit import Chem
from rdkit.Chem import Descriptors

from oodmol.data.featurize.base import MolInput, inputs_of
from oodmol.data.featurize.descriptors import RDKitDescriptors
from oodmol.data.featurize.fingerprints import MorganFingerprint
from oodmol.data.featurize.impute import TrainImputer
from oodmol.data.table import Geometry, MoleculeTable


@pytest.fixture(scope="module")
def descriptors() -> RDKitDescriptors:
    return RDKitDescriptors()


def test_descriptors_known_values_for_ethanol(descriptors):
    x = descriptors(MolInput("CCO"))["x"]
    value = dict(zip(descriptors.names, x, strict=True))
    assert x.dtype == np.float64
    assert len(x) == len(Descriptors._descList)
    assert value["MolWt"] == pytest.approx(46.069, abs=1e-3)
    assert value["NumHDonors"] == 1
    assert value["HeavyAtomCount"] == 3
    assert np.isnan(value["Kappa3"])  # no path of three bonds
    assert np.isfinite(np.delete(x, descriptors.names.index("Kappa3"))).all()


@pytest.mark.parametrize(
    ("smiles", "undefined"),
    [
        ("CCCC", set()),
        ("CC(C)(C)O", {"Kappa3"}),  # RDKit's Kappa3: 9,508 (alpha -0.04 its denominator)
        ("CC(C)(C)C", {"Kappa3"}),  # RDKit's: 0, alpha being exactly 0
        ("CO", {"Kappa2", "Kappa3", "Phi"}),
        ("O", {"Kappa1", "Kappa2", "Kappa3", "Phi"}),
    ],
)
def test_shape_indices_are_undefined_without_their_paths(descriptors, smiles, undefined):
    value = dict(zip(descriptors.names, descriptors(MolInput(smiles))["x"], strict=True))
    mol = Chem.MolFromSmiles(smiles)
    for name in ("Kappa1", "Kappa2", "Kappa3", "Phi"):
        if name in undefined:
            assert np.isnan(value[name]), name
        else:
            assert value[name] == getattr(Descriptors, name)(mol), name


def test_ipc_is_log1p_of_rdkit_ipc(descriptors):
    x = descriptors(MolInput("c1ccccc1"))["x"]
    raw = Descriptors.Ipc(Chem.MolFromSmiles("c1ccccc1"))
    assert raw > 30  # not already logged
    assert x[descriptors.names.index("Ipc")] == pytest.approx(math.log1p(raw), rel=1e-12)


def test_failed_descriptors_become_nan(descriptors):
    salt = descriptors(MolInput("[Na+].[Cl-]"))["x"]  # BCUT2D fails on salts
    assert 0 < np.isnan(salt).sum() < len(salt)
    assert np.isnan(descriptors(MolInput("not a smiles"))["x"]).all()


def test_descriptor_params_name_every_descriptor(descriptors):
    params = descriptors.params()
    assert list(params["names"]) == [name for name, _ in Descriptors._descList]
    assert "rdkit" in params


def test_morgan_bits_follow_radius_and_size():
    def bits(smiles, **kwargs):
        return MorganFingerprint(**kwargs)(MolInput(smiles))["x"]

    # butane: 2 atom types, 2 new environments at radius 1, and at radius 2 only the
    # whole molecule (RDKit drops environments whose bond set it has seen before)
    assert [bits("CCCC", radius=r).sum() for r in (0, 1, 2)] == [2, 4, 5]
    x = bits("CCCC", radius=2, n_bits=1024)
    assert x.shape == (1024,) and x.dtype == np.uint8 and set(np.unique(x)) <= {0, 1}
    ibuprofen = "CC(C)Cc1ccc(cc1)C(C)C(=O)O"
    assert not np.array_equal(bits(ibuprofen, radius=1), bits(ibuprofen, radius=3))
    assert MorganFingerprint(radius=1).params() != MorganFingerprint(radius=3).params()


def test_morgan_counts():
    x = MorganFingerprint(counts=True)(MolInput("CCCC"))["x"]
    assert x.dtype == np.float32
    assert sorted(x[x > 0]) == [1, 2, 2, 2, 2]  # symmetric atoms count twice


def test_featurizers_pickle():
    import pickle

    for featurizer in (RDKitDescriptors(), MorganFingerprint(radius=3)):
        clone = pickle.loads(pickle.dumps(featurizer))
        assert clone.params() == featurizer.params()
        np.testing.assert_array_equal(clone(MolInput("CCO"))["x"], featurizer(MolInput("CCO"))["x"])


def test_inputs_of_carries_geometry():
    geometry = Geometry(
        atomic_numbers=np.array([6, 8, 6, 6, 8], dtype=np.int8),
        coords=np.arange(15, dtype=np.float32).reshape(5, 3),
        offsets=np.array([0, 2, 5]),
    )
    table = MoleculeTable("g", np.array([10, 11]), np.array(["CO", "CCO"]), {}, geometry)
    first, second = inputs_of(table, np.array([1, 0]))
    assert (first.smiles, second.smiles) == ("CCO", "CO")
    np.testing.assert_array_equal(first.atomic_numbers, [6, 6, 8])
    np.testing.assert_array_equal(second.coords, [[0, 1, 2], [3, 4, 5]])
    plain = MoleculeTable("p", np.array([1]), np.array(["C"]), {})
    assert inputs_of(plain, np.array([0])) == [MolInput("C")]


def test_imputer_fills_with_train_means_only():
    train = np.array([[1.0, np.nan, np.inf], [3.0, 4.0, np.nan], [np.nan, 8.0, -np.inf]])
    imputer = TrainImputer().fit(train)
    np.testing.assert_array_equal(imputer.means, [2.0, 6.0, 0.0])
    np.testing.assert_array_equal(imputer.empty_columns, [2])

    filled, n = imputer.transform(train)
    assert n == 5
    np.testing.assert_array_equal(filled, [[1, 6, 0], [3, 4, 0], [2, 8, 0]])

    test = np.array([[1e6, np.nan, 5.0]])
    filled, n = imputer.transform(test)
    assert n == 1
    np.testing.assert_array_equal(filled, [[1e6, 6.0, 5.0]])
    np.testing.assert_array_equal(imputer.means, [2.0, 6.0, 0.0])  # test rows changed nothing
    assert np.isnan(test[0, 1])  # input left untouched


def test_imputer_requires_fit():
    with pytest.raises(RuntimeError):
        TrainImputer().transform(np.zeros((1, 1)))
