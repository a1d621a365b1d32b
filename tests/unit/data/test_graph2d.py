"""The graph2d featuriser (Chemprop v2's atom and bond features) and graph batching."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.data import Batch, Data

from oodmol.data.batches import GraphBatch
from oodmol.data.features import GraphFeatures, GraphSet
from oodmol.data.featurize.base import MolInput
from oodmol.data.featurize.graph2d import ATOM_DIM, BOND_DIM, Graph2D
from oodmol.data.store import FeatureStore
from oodmol.data.table import MoleculeTable

# Atom vector columns, by hand from Chemprop v2's MultiHotAtomFeaturizer.v2(): element
# 0-37 (Z = 1..36 at Z - 1, iodine 36, other 37), total degree 38-44, formal charge
# 45-50 (order -1, -2, 1, 2, 0, other), chiral tag 51-55, total Hs 56-61, hybridisation
# 62-69 (S, SP, SP2, SP2D, SP3, SP3D, SP3D2, other), aromatic 70, mass / 100 at 71.
CARBON, NITROGEN, OXYGEN = 5, 6, 7  # Z - 1
SP2, SP3 = 64, 66
# Bond columns: 0 "no bond", 1-4 single/double/triple/aromatic, 5 conjugated,
# 6 in ring, 7-13 stereo (NONE, ANY, Z, E, CIS, TRANS, other).
SINGLE, DOUBLE, AROMATIC, CONJ, RING, STEREO_NONE, STEREO_E = 1, 2, 4, 5, 6, 7, 10


def hot(vectors: np.ndarray, drop_last: bool = True) -> list[list[int]]:
    """The nonzero columns of each row (the mass column left out for atoms)."""
    return [np.flatnonzero(v[:-1] if drop_last else v).tolist() for v in vectors]


def test_acetic_acid_known_vectors():
    g = Graph2D()(MolInput("CC(=O)O"))
    assert g["x"].shape == (4, ATOM_DIM) == (4, 72) and g["x"].dtype == np.float32
    assert hot(g["x"]) == [
        [CARBON, 38 + 4, 45 + 4, 51, 56 + 3, SP3],  # CH3: degree 4, charge 0, 3 H
        [CARBON, 38 + 3, 45 + 4, 51, 56 + 0, SP2],  # carboxyl C
        [OXYGEN, 38 + 1, 45 + 4, 51, 56 + 0, SP2],  # =O
        [OXYGEN, 38 + 2, 45 + 4, 51, 56 + 1, SP2],  # OH (conjugated, so sp2 in RDKit)
    ]
    assert g["x"][:, 71] == pytest.approx([0.12011, 0.12011, 0.15999, 0.15999], abs=1e-6)
    assert g["edge_index"].tolist() == [[0, 1, 1, 2, 1, 3], [1, 0, 2, 1, 3, 1]]
    assert g["edge_attr"].shape == (6, BOND_DIM) == (6, 14)
    assert hot(g["edge_attr"], drop_last=False) == [
        [SINGLE, STEREO_NONE],
        [SINGLE, STEREO_NONE],
        [DOUBLE, CONJ, STEREO_NONE],
        [DOUBLE, CONJ, STEREO_NONE],
        [SINGLE, CONJ, STEREO_NONE],
        [SINGLE, CONJ, STEREO_NONE],
    ]


def test_charged_aromatic_atom_stereo_bond_and_chirality():
    g = Graph2D()(MolInput("C/C=C/c1cc[nH+]cc1"))
    # pyridinium N: aromatic, charge +1 (column 2 of the charge block), one H
    assert hot(g["x"][6:7]) == [[NITROGEN, 38 + 3, 45 + 2, 51, 56 + 1, SP2, 70]]
    assert g["x"][6, 71] == pytest.approx(0.14007, abs=1e-6)
    bonds = hot(g["edge_attr"][::2], drop_last=False)  # one row per bond
    assert bonds[1] == [DOUBLE, CONJ, STEREO_E]  # the E double bond
    assert bonds[3] == [AROMATIC, CONJ, RING, STEREO_NONE]
    chiral = Graph2D()(MolInput("C[C@H](N)O"))["x"][1]
    assert np.flatnonzero(chiral[51:56]).tolist() == [2]  # CHI_TETRAHEDRAL_CCW


def test_edges_come_in_reverse_pairs_and_hydrogens_are_optional():
    for smiles in ("c1ccccc1O", "C", "[Na+].[Cl-]"):
        ei = Graph2D()(MolInput(smiles))["edge_index"]
        np.testing.assert_array_equal(ei[:, 1::2], ei[::-1, ::2])  # edge e ^ 1 reverses e
    methane = Graph2D(add_hs=True)(MolInput("C"))
    assert methane["x"].shape == (5, 72) and methane["edge_index"].shape == (2, 8)
    assert Graph2D()(MolInput("C"))["edge_attr"].shape == (0, 14)
    assert Graph2D(add_hs=True).params() != Graph2D().params()  # separate caches
    with pytest.raises(ValueError, match="cannot parse"):
        Graph2D()(MolInput("not a smiles"))


SMILES = ["CC(=O)O", "C", "c1ccccc1O", "C/C=C/c1cc[nH+]cc1", "N#CC"]


def test_batches_shift_edges_and_mark_molecules():
    graphs = [Graph2D()(MolInput(s)) for s in SMILES]
    dataset = GraphSet(graphs, np.arange(len(SMILES), dtype=float), GraphBatch)
    order = [3, 1, 0]
    (batch,) = dataset.__getitems__(order)
    sizes = [len(graphs[i]["x"]) for i in order]
    starts = np.cumsum([0, *sizes[:-1]])
    np.testing.assert_array_equal(batch.x, np.concatenate([graphs[i]["x"] for i in order]))
    np.testing.assert_array_equal(
        batch.edge_index,
        np.concatenate(
            [graphs[i]["edge_index"] + s for i, s in zip(order, starts, strict=True)], axis=1
        ),
    )
    np.testing.assert_array_equal(
        batch.edge_attr, np.concatenate([graphs[i]["edge_attr"] for i in order])
    )
    assert batch.molecule.tolist() == [0] * sizes[0] + [1] * sizes[1] + [2] * sizes[2]
    assert batch.y.tolist() == order and batch.index.tolist() == order
    assert batch.edge_index.dtype == torch.int64
    # the same layout as PyTorch Geometric's own batching
    pyg = Batch.from_data_list(
        [Data(**{k: torch.from_numpy(v) for k, v in graphs[i].items()}) for i in order]
    )
    for ours, theirs in (
        ("x", "x"),
        ("edge_index",) * 2,
        ("edge_attr",) * 2,
        ("molecule", "batch"),
    ):
        torch.testing.assert_close(getattr(batch, ours), pyg[theirs], rtol=0, atol=0)


def test_graph_features_read_the_cache(tmp_path):
    ids = np.array([10, 3, 7, 5, 2])
    table = MoleculeTable("tiny", ids, np.array(SMILES), {"y": np.zeros(5)})
    store = FeatureStore.build_or_open(Graph2D(), table, tmp_path, n_jobs=1, progress=False)
    features = GraphFeatures()
    facts = features.fit(store, ids[:3])
    assert facts == {"atom_dim": 72, "bond_dim": 14} == features.facts()
    dataset = features.dataset(store, ids[[4, 1]], np.array([1.0, 2.0]), "val")
    (batch,) = dataset.__getitems__([0, 1])
    direct = [Graph2D()(MolInput(SMILES[i])) for i in (4, 1)]
    np.testing.assert_array_equal(batch.x, np.concatenate([g["x"] for g in direct]))
    assert batch.y.tolist() == [1.0, 2.0]
    assert features.collate(dataset.__getitems__([1])).y.tolist() == [2.0]
