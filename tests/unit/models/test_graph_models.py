"""The D-MPNN and TGNN backbones, their training step, and the Noam-like schedule."""

from __future__ import annotations

from functools import partial
from types import SimpleNamespace
from typing import ClassVar

import numpy as np
import pytest
import torch
from fit_helpers import training_losses

from oodmol.data.batches import GraphBatch
from oodmol.data.features import GraphSet
from oodmol.data.featurize.base import MolInput
from oodmol.data.featurize.graph2d import Graph2D
from oodmol.models.backbones.dmpnn import DMPNN
from oodmol.models.backbones.tgnn import GCL, TGNN
from oodmol.models.module import PropertyRegressor
from oodmol.models.schedules import build_scheduler, noam_like

pytestmark = pytest.mark.usefixtures("one_thread")

SMILES = ["CC(=O)O", "C", "c1ccccc1O", "C/C=C/c1cc[nH+]cc1", "N#CC", "OCCN"]


def graph_batch(smiles=SMILES, add_hs=False) -> GraphBatch:
    graphs = [Graph2D(add_hs)(MolInput(s)) for s in smiles]
    y = np.linspace(-1.0, 1.0, len(smiles))
    return GraphSet(graphs, y, GraphBatch).__getitems__(list(range(len(smiles))))[0]


def reference_dmpnn_atoms(model: DMPNN, batch: GraphBatch) -> torch.Tensor:
    """Chemprop's bond message passing written edge by edge, from its definition."""
    x, edge_attr = batch.x, batch.edge_attr
    edges = batch.edge_index.t().tolist()
    relu = torch.relu
    a0 = [model.W_i(torch.cat([x[u], edge_attr[e]])) for e, (u, _) in enumerate(edges)]
    h = [relu(a) for a in a0]
    for _ in range(model.depth - 1):
        new = []
        for e, (u, v) in enumerate(edges):
            # the states entering u, except the one coming back from v
            m = sum((h[f] for f, (w, t) in enumerate(edges) if t == u and w != v), 0 * h[e])
            new.append(relu(a0[e] + model.W_h(m)))
        h = new
    atoms = []
    for v in range(len(x)):
        m = sum((h[f] for f, (_, t) in enumerate(edges) if t == v), 0 * h[0])
        atoms.append(relu(model.W_o(torch.cat([x[v], m]))))
    return torch.stack(atoms)


@pytest.mark.parametrize("depth", [1, 3])
def test_dmpnn_matches_its_definition(depth):
    torch.manual_seed(0)
    batch = graph_batch(["CC(=O)O", "C", "OC=CN"])
    model = DMPNN(72, 14, hidden=8, depth=depth).eval()
    with torch.no_grad():
        ours = model.encode(batch.x, batch.edge_index, batch.edge_attr)
        torch.testing.assert_close(ours, reference_dmpnn_atoms(model, batch), atol=1e-5, rtol=0)


def test_dmpnn_aggregations_and_ffn():
    torch.manual_seed(0)
    batch = graph_batch()
    sizes = torch.bincount(batch.molecule).float().unsqueeze(1)
    model = DMPNN(72, 14, hidden=16, depth=2, ffn_layers=2, ffn_hidden=12).eval()
    with torch.no_grad():
        h = model.encode(batch.x, batch.edge_index, batch.edge_attr)
        total = torch.zeros(len(SMILES), 16).index_add_(0, batch.molecule, h)
        for aggregation, expected in [
            ("norm", total / 100),
            ("sum", total),
            ("mean", total / sizes),
        ]:
            model.aggregation = aggregation
            torch.testing.assert_close(model.pool(h, batch.molecule, len(SMILES)), expected)
        assert model(batch).shape == (len(SMILES), 12) and model.out_dim == 12
    with pytest.raises(ValueError, match="aggregation"):
        DMPNN(72, 14, aggregation="max")


def test_tgnn_layer_sums_edge_messages_into_a_residual_update():
    """The layer's regrouped arithmetic equals its definition edge by edge: the edge MLP
    on [h_i ‖ h_j ‖ e_ij] with e_ij the embedded bond features."""
    torch.manual_seed(0)
    layer, embedding = GCL(hidden=4), torch.nn.Linear(3, 4)
    h, f = torch.randn(3, 4), torch.randn(4, 3)
    edge_index = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])  # a path 0 - 1 - 2
    with torch.no_grad():

        def message(i, j, k):
            return layer.edge_mlp(torch.cat([h[i], h[j], embedding(f[k])]))

        received = [message(0, 1, 1), message(1, 0, 0) + message(1, 2, 3), message(2, 1, 2)]
        expected = torch.stack(
            [h[i] + layer.node_mlp(torch.cat([h[i], m])) for i, m in enumerate(received)]
        )
        torch.testing.assert_close(layer(h, edge_index, f, embedding), expected)


def test_tgnn_returns_atoms_for_the_readout():
    batch = graph_batch(add_hs=True)
    h, segment = TGNN(72, 14, hidden=8, layers=2)(batch)
    assert h.shape == (len(batch.x), 8) and segment is batch.molecule
    assert h.abs().max() < 1  # softsign


@pytest.mark.parametrize(
    "backbone,extensive",
    [(partial(DMPNN, hidden=16, depth=2, dropout=0.1), False), (partial(TGNN, hidden=8), True)],
)
def test_training_steps_lower_the_loss(backbone, extensive):
    torch.manual_seed(0)
    batch = graph_batch(add_hs=extensive)
    model = PropertyRegressor(
        backbone(atom_dim=72, bond_dim=14),
        optimizer=partial(torch.optim.Adam, lr=1e-2),
        extensive=extensive,
    )
    losses = training_losses(model, batch, steps=30)
    assert losses[-1] < 0.5 * losses[0]


def fake_trainer(batches_per_epoch: int, max_epochs: int) -> SimpleNamespace:
    return SimpleNamespace(
        estimated_stepping_batches=batches_per_epoch * max_epochs,
        num_training_batches=batches_per_epoch,
        accumulate_grad_batches=1,
        max_epochs=max_epochs,
    )


def test_noam_like_schedule_warms_up_then_decays_to_final():
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=0.5)
    factory = partial(noam_like, warmup_epochs=2, init_lr=1e-4, max_lr=1e-3, final_lr=1e-5)
    scheduler = build_scheduler(factory, optimizer, fake_trainer(10, max_epochs=12))
    lrs = []
    for _ in range(130):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs[0] == pytest.approx(1e-4)  # the optimizer's own lr is replaced
    assert lrs[10] == pytest.approx(1e-4 + 0.5 * 9e-4)  # linear: halfway after 1 of 2 epochs
    assert max(lrs) == pytest.approx(1e-3) == lrs[20]  # peak at the end of the warm-up
    assert np.all(np.diff(lrs[:21]) > 0) and np.all(np.diff(lrs[20:120]) < 0)
    assert lrs[70] == pytest.approx(1e-3 * (1e-2) ** 0.5)  # geometric: halfway in log
    assert lrs[119] == pytest.approx(1e-5, rel=0.05) and lrs[120:] == [pytest.approx(1e-5)] * 10


def test_plain_scheduler_factories_get_only_the_optimizer():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    factory = partial(torch.optim.lr_scheduler.ExponentialLR, gamma=0.5)
    scheduler = build_scheduler(factory, optimizer, trainer=None)
    optimizer.step()
    scheduler.step()
    assert optimizer.param_groups[0]["lr"] == 0.5


class NormRecordingSGD(torch.optim.SGD):
    """SGD that records the gradients' total norm each time it steps (after clipping)."""

    norms: ClassVar[list[float]] = []

    def step(self, closure=None):
        loss = closure() if closure is not None else None  # Lightning passes the closure
        grads = [
            p.grad for group in self.param_groups for p in group["params"] if p.grad is not None
        ]
        NormRecordingSGD.norms.append(
            float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])))
        )
        super().step()
        return loss


@pytest.mark.parametrize("clip", [None, 1e-3])
def test_gradient_clip_norm_bounds_every_step(clip):
    import lightning as L
    from torch.utils.data import DataLoader

    batch = graph_batch(add_hs=True)
    module = PropertyRegressor(
        TGNN(72, 14, hidden=8, layers=1),
        optimizer=partial(NormRecordingSGD, lr=1e-3),
        gradient_clip_norm=clip,
    )
    module.y_std.fill_(1e-3)  # huge standardised targets: unclipped gradients are large
    module.setup = lambda stage: None  # keep these statistics (no datamodule here)
    NormRecordingSGD.norms = []
    trainer = L.Trainer(
        max_steps=3, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, accelerator="cpu",
    )  # fmt: skip
    trainer.fit(module, DataLoader([batch] * 3, batch_size=None))
    assert len(NormRecordingSGD.norms) == 3
    if clip is None:
        assert min(NormRecordingSGD.norms) > 1.0
    else:
        assert max(NormRecordingSGD.norms) <= clip * (1 + 1e-5)
