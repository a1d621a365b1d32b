"""A joined representation (`oodmol.data.featurize.joined`): its vectors are its parts'
side by side, read from the parts' own caches (nothing is featurised twice), and a
molecule any part refuses is refused with that part's reason."""

from __future__ import annotations

import numpy as np
import pytest

from oodmol.data.featurize.descriptors import RDKitDescriptors
from oodmol.data.featurize.fingerprints import MorganFingerprint
from oodmol.data.featurize.joined import Joined
from oodmol.data.store import FeatureStore
from oodmol.data.table import MoleculeTable

SMILES = ["CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "CCCCCCCCCCCC", "OC(=O)CCC(=O)O"]
MOL_IDS = np.array([3, 5, 8, 13, 21])


def table() -> MoleculeTable:
    return MoleculeTable("t", MOL_IDS, np.array(SMILES), {"y": np.zeros(len(SMILES))})


def parts(max_atoms: int = 300) -> tuple[RDKitDescriptors, MorganFingerprint]:
    descriptors = RDKitDescriptors(names=["MolWt", "TPSA", "MolLogP"], max_atoms=max_atoms)
    return descriptors, MorganFingerprint(radius=2, n_bits=64)


def test_a_joined_vector_is_its_parts_side_by_side(tmp_path) -> None:
    descriptors, morgan = parts()
    joined = FeatureStore.build_or_open(
        Joined(descriptors=descriptors, morgan=morgan), table(), tmp_path, n_jobs=1
    )
    alone = [FeatureStore.build_or_open(p, table(), tmp_path, n_jobs=1) for p in parts()]
    expected = np.hstack([store.matrix(MOL_IDS) for store in alone])
    assert expected.shape == (5, 3 + 64)
    np.testing.assert_array_equal(joined.matrix(MOL_IDS), expected)
    np.testing.assert_array_equal(joined.get(8)["x"], expected[2])
    rows = [arrays["x"] for arrays in joined.iter_arrays([21, 3])]
    np.testing.assert_array_equal(np.stack(rows), expected[[4, 0]])
    assert joined.meta["featurizer"]["name"] == "descriptors+morgan"
    assert len(joined) == 5 and joined.failed == {}
    np.testing.assert_array_equal(joined.mol_ids(), MOL_IDS)
    # the parts' caches are the joined one's: nothing else was written
    assert sorted(p.name for p in tmp_path.glob("*.lmdb")) == sorted(s.path.name for s in alone)


def test_a_molecule_a_part_refuses_is_refused_with_that_parts_reason(tmp_path) -> None:
    descriptors, morgan = parts(max_atoms=11)  # the dodecane (12 heavy atoms) is refused
    joined = FeatureStore.build_or_open(
        Joined(descriptors=descriptors, morgan=morgan), table(), tmp_path, n_jobs=1
    )
    assert list(joined.failed) == [13]
    assert joined.failed[13].startswith("descriptors: ")
    assert "max_atoms" in joined.failed[13]
    assert len(joined) == 4


def test_a_subset_is_joined_from_subsets_and_extended_later(tmp_path) -> None:
    descriptors, morgan = parts()
    small = FeatureStore.build_or_open(
        Joined(descriptors=descriptors, morgan=morgan), table(), tmp_path, n_jobs=1, mol_ids=[3, 5]
    )
    np.testing.assert_array_equal(small.mol_ids(), [3, 5])
    np.testing.assert_array_equal(small.lacks([3, 8, 21]), [8, 21])
    more = FeatureStore.build_or_open(
        Joined(descriptors=descriptors, morgan=morgan), table(), tmp_path, n_jobs=1, mol_ids=[21]
    )
    assert more.lacks(MOL_IDS).tolist() == [8, 13]
    assert more.matrix([21]).shape == (1, 67)


def test_a_joined_representation_needs_two_parts() -> None:
    with pytest.raises(ValueError, match="two parts or more"):
        Joined(descriptors=parts()[0])
