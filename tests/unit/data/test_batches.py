"""Typed batches: a batch of unlabelled molecules (prediction) is as complete as a training
batch, and every kind of feature set builds its own batch type."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from geometry_helpers import SMILES

from oodmol.config import compose_config
from oodmol.data.batches import GraphBatch, PointCloudBatch, VectorBatch
from oodmol.data.features import GraphSet, TensorSet
from oodmol.data.featurize.base import MolInput
from oodmol.data.featurize.graph2d import Graph2D
from oodmol.data.featurize.graph3d import Graph3D
from oodmol.training.build import build_model


def test_vector_batch_without_targets_counts_its_molecules() -> None:
    dataset = TensorSet(torch.randn(7, 3), None)
    (batch,) = dataset.__getitems__([4, 0, 6])
    assert isinstance(batch, VectorBatch)
    assert len(dataset) == 7 and len(batch) == 3 and batch.y is None
    assert batch.index.tolist() == [4, 0, 6]


@pytest.mark.parametrize(
    "featurizer, batch_type, fields",
    [
        (Graph2D(), GraphBatch, {}),
        (Graph3D(), PointCloudBatch, {"atom_fields": ("z", "pos"), "edge_fields": ()}),
    ],
)
def test_graph_batches_without_targets_count_their_molecules(featurizer, batch_type, fields):
    graphs = [featurizer(MolInput(s)) for s in SMILES]
    dataset = GraphSet(graphs, None, batch_type, **fields)
    (batch,) = dataset.__getitems__([2, 3])
    assert isinstance(batch, batch_type)
    assert len(dataset) == len(SMILES) and len(batch) == 2 and batch.y is None
    n_atoms = sum(len(next(iter(graphs[i].values()))) for i in (2, 3))
    assert batch.molecule.tolist() == sorted(batch.molecule.tolist()) and len(batch.molecule) == (
        n_atoms
    )


@pytest.mark.parametrize(
    "batch_type, fields",
    [(GraphBatch, {}), (PointCloudBatch, {"atom_fields": ("z", "pos"), "edge_fields": ()})],
)
def test_an_empty_graph_set_is_a_set_of_no_molecules(batch_type, fields) -> None:
    # protocol=boom has no validation molecules: its set must exist, and be empty
    dataset = GraphSet([], np.zeros(0), batch_type, **fields)
    assert len(dataset) == 0


def test_model_predicts_a_batch_without_targets() -> None:
    module = build_model(compose_config("train", ["model=mlp"]), {"backbone.in_dim": 3})
    batch = VectorBatch(x=torch.randn(5, 3), index=torch.arange(5))
    prediction = module.predict_batch(batch)
    assert prediction.mean.shape == (5,)
    assert np.isfinite(prediction.mean.detach().numpy()).all()


def test_a_batch_moves_every_tensor_and_keeps_optional_fields_that_are_none() -> None:
    """`Batch.to` is how a batch reaches a device outside Lightning (the GPU tests, a
    benchmark): a point cloud without fragments must not fail on its None."""
    n = torch.arange(3)
    batch = PointCloudBatch(index=n, z=n, pos=torch.ones(3, 3), molecule=n)
    moved = batch.to("meta")
    assert moved.fragment is None and moved.y is None
    assert {t.device.type for t in (moved.index, moved.z, moved.pos, moved.molecule)} == {"meta"}
    assert batch.pos.device.type == "cpu"  # the original is left as it was
