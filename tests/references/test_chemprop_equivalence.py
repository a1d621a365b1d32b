"""Our graph2d features and D-MPNN against Chemprop v2 itself, with identical weights.

Chemprop 2.3.1 pins rdkit==2026.03.6 (through cuik-molmaker), which would replace the
project's RDKit, so it is not a dependency: these tests skip where chemprop is absent.
Run them in an environment that has it, e.g. `make chemprop-env` then
`.venv-chemprop/bin/python -m pytest tests/references/test_chemprop_equivalence.py`.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oodmol.data.batches import GraphBatch
from oodmol.data.features import GraphSet
from oodmol.data.featurize.base import MolInput
from oodmol.data.featurize.graph2d import Graph2D
from oodmol.models.backbones.dmpnn import DMPNN

chemprop = pytest.importorskip("chemprop", minversion="2.0")
from chemprop.data import BatchMolGraph  # noqa: E402
from chemprop.featurizers import SimpleMoleculeMolGraphFeaturizer  # noqa: E402
from chemprop.models import MPNN  # noqa: E402
from chemprop.nn import (  # noqa: E402
    BondMessagePassing,
    MeanAggregation,
    NormAggregation,
    RegressionFFN,
    SumAggregation,
)
from chemprop.utils import make_mol  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

SMILES = [
    "CC(=O)O",
    "C",
    "C/C=C/c1cc[nH+]cc1",
    "N[C@@H](Cc1ccccc1)C(=O)[O-]",
    "Clc1ccc2[nH]ccc2c1I",
    "[Na+].[Cl-]",
    "C1=CC2=CC=CC=CC2=C1",
    "O=[N+]([O-])c1ccc(S(=O)(=O)N)cc1",
]


def test_features_match_chemprop():
    theirs_featurizer = SimpleMoleculeMolGraphFeaturizer()  # v2 atoms, default bonds
    ours_featurizer = Graph2D()
    for smiles in SMILES:
        theirs = theirs_featurizer(make_mol(smiles))
        ours = ours_featurizer(MolInput(smiles))
        np.testing.assert_array_equal(ours["x"], theirs.V, err_msg=smiles)
        np.testing.assert_array_equal(ours["edge_attr"], theirs.E, err_msg=smiles)
        np.testing.assert_array_equal(ours["edge_index"], theirs.edge_index, err_msg=smiles)
        reverse = np.arange(ours["edge_index"].shape[1]) ^ 1
        np.testing.assert_array_equal(reverse, theirs.rev_edge_index, err_msg=smiles)


def copy_linear(theirs: torch.nn.Linear, ours: torch.nn.Linear) -> None:
    theirs.weight.data.copy_(ours.weight.data)
    if ours.bias is not None:
        theirs.bias.data.copy_(ours.bias.data)


@pytest.mark.parametrize(
    "aggregation,theirs_aggregation,depth,ffn_layers",
    [
        ("norm", NormAggregation, 3, 1),
        ("mean", MeanAggregation, 2, 2),
        ("sum", SumAggregation, 5, 3),
    ],
)
def test_dmpnn_matches_chemprop(aggregation, theirs_aggregation, depth, ffn_layers):
    torch.manual_seed(0)
    d_h, d_ffn = 32, 24
    ours = DMPNN(
        72, 14, d_h, depth, aggregation=aggregation, ffn_layers=ffn_layers, ffn_hidden=d_ffn
    )
    head = torch.nn.Linear(d_ffn, 1)  # the shared RegressionHead's output layer
    message_passing = BondMessagePassing(d_v=72, d_e=14, d_h=d_h, depth=depth)
    predictor = RegressionFFN(input_dim=d_h, hidden_dim=d_ffn, n_layers=ffn_layers)
    for name in ("W_i", "W_h", "W_o"):
        copy_linear(getattr(message_passing, name), getattr(ours, name))
    ours_linears = [m for m in ours.ffn if isinstance(m, torch.nn.Linear)] + [head]
    for block, linear in zip(predictor.ffn, ours_linears, strict=True):
        copy_linear(block[-1], linear)  # Chemprop's MLP blocks end in their Linear
    theirs = MPNN(message_passing, theirs_aggregation(), predictor).eval()
    ours.eval()

    featurizer = SimpleMoleculeMolGraphFeaturizer()
    bmg = BatchMolGraph([featurizer(make_mol(s)) for s in SMILES])
    graphs = [Graph2D()(MolInput(s)) for s in SMILES]
    dataset = GraphSet(graphs, np.zeros(len(SMILES)), GraphBatch)
    batch = dataset.__getitems__(list(range(len(SMILES))))[0]
    with torch.no_grad():
        atoms_theirs = message_passing(bmg)
        atoms_ours = ours.encode(batch.x, batch.edge_index, batch.edge_attr)
        torch.testing.assert_close(atoms_ours, atoms_theirs, atol=1e-5, rtol=0)
        torch.testing.assert_close(
            ours.pool(atoms_ours, batch.molecule, len(SMILES)),
            theirs.agg(atoms_theirs, bmg.batch),
            atol=1e-5,
            rtol=0,
        )
        torch.testing.assert_close(
            head(ours(batch)).squeeze(1), theirs(bmg).squeeze(1), atol=1e-5, rtol=0
        )
