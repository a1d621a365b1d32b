"""A joined representation (`oodmol.data.featurize.joined`): its vectors are its parts'
side by side, read from the parts' own caches (nothing is featurised twice), and a
molecule any part refuses is refused with that part's reason."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oodmol.data.features import GraphFeatures, VectorFeatures
from oodmol.data.featurize.descriptors import RDKitDescriptors
from oodmol.data.featurize.fingerprints import MorganFingerprint
from oodmol.data.featurize.graph2d import Graph2D
from oodmol.data.featurize.joined import GraphWithVectors, Joined
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


def test_a_graph_with_vectors_holds_the_graph_and_its_vectors_as_x_d(tmp_path) -> None:
    descriptors, morgan = parts()
    featurizer = GraphWithVectors(graph=Graph2D(), descriptors=descriptors, morgan=morgan)
    store = FeatureStore.build_or_open(featurizer, table(), tmp_path, n_jobs=1)
    graphs = FeatureStore.build_or_open(Graph2D(), table(), tmp_path, n_jobs=1)
    vectors = np.hstack(
        [
            FeatureStore.build_or_open(p, table(), tmp_path, n_jobs=1).matrix(MOL_IDS)
            for p in parts()
        ]
    )
    np.testing.assert_array_equal(store.matrix(MOL_IDS, "x_d"), vectors)
    arrays = store.get(8)
    np.testing.assert_array_equal(arrays["x_d"], vectors[2])
    np.testing.assert_array_equal(arrays["x"], graphs.get(8)["x"])
    np.testing.assert_array_equal(arrays["edge_index"], graphs.get(8)["edge_index"])

    # batched: the vectors scaled with the training molecules' mean and spread
    features = GraphFeatures(vectors=VectorFeatures(field="x_d"))
    train = MOL_IDS[:4]
    facts = features.fit(store, train)
    assert facts["atom_dim"] == graphs.get(8)["x"].shape[1]
    assert features.facts()["descriptor_dim"] == 3 + 64
    batch = features.dataset(store, MOL_IDS, np.zeros(5), "test").__getitems__([4, 1])[0]
    mean, std = vectors[:4].mean(0), vectors[:4].std(0)
    expected = (vectors[[4, 1]] - mean) / np.where(std > 1e-9 * std.max(), std, 1.0)
    np.testing.assert_allclose(batch.x_d.numpy(), expected, rtol=1e-5, atol=1e-6)
    assert batch.x_d.dtype == torch.float32 and len(batch) == 2
    # what fit learnt travels with a checkpoint
    again = GraphFeatures(vectors=VectorFeatures(field="x_d"))
    again.load_state_dict(features.state_dict())
    redone = again.dataset(store, MOL_IDS, None, "new").__getitems__([4, 1])[0]
    torch.testing.assert_close(redone.x_d, batch.x_d)
    with pytest.raises(ValueError, match="vectors beside the graphs"):
        GraphFeatures().load_state_dict(features.state_dict())
