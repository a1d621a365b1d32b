"""The uncertainty parts of the neural model: mean-variance head, MC and Concrete
dropout, on a tiny MLP without any data module."""

import pytest
import torch
from torch import nn

from oodmol.data.batches import VectorBatch
from oodmol.models.backbones.mlp import MLPBackbone
from oodmol.models.module import PropertyRegressor
from oodmol.uq.dropout import (
    ConcreteDropout,
    FixedRateDropout,
    LearnedConcreteDropout,
    MCDropout,
)
from oodmol.uq.likelihood import GaussianLikelihood

BATCH = VectorBatch(x=torch.randn(8, 4), y=torch.randn(8), index=torch.arange(8))


def model(**uq) -> PropertyRegressor:
    torch.manual_seed(0)
    return PropertyRegressor(
        MLPBackbone(in_dim=4, hidden=[16, 16]), optimizer=torch.optim.Adam, **uq
    )


def test_mean_variance_head_predicts_a_positive_variance_in_property_units():
    m = model(likelihood=GaussianLikelihood(min_variance=1e-3)).eval()
    m.y_mean.fill_(10.0)
    m.y_std.fill_(2.0)
    assert m(BATCH).shape == (8, 2)
    p = m.predict_batch(BATCH)
    assert p.mean.shape == (8,) and p.var_epistemic is None
    assert torch.all(p.var_aleatoric >= 1e-3 * 4)  # floor, in units²: y_std² · floor


def test_gaussian_nll_loss_matches_the_formula():
    lik = GaussianLikelihood(min_variance=1e-6)
    out = torch.tensor([[0.0, 0.0], [1.0, 2.0]])
    target = torch.tensor([1.0, 1.0])
    mean, var = lik.split(out)
    expected = torch.mean(0.5 * torch.log(2 * torch.pi * var) + (target - mean) ** 2 / (2 * var))
    assert lik.loss(out, target) == pytest.approx(float(expected))


def test_mc_dropout_samples_only_at_test_time():
    m = model(mc_dropout=FixedRateDropout(rate=0.5), test_passes=20).eval()
    layers = [x for x in m.modules() if isinstance(x, MCDropout)]
    assert len(layers) == 2 and not any(type(x) is nn.Dropout for x in m.modules())
    first, second = m.predict_batch(BATCH).mean, m.predict_batch(BATCH).mean
    assert torch.equal(first, second)  # validation: deterministic
    p = m.predict_test(BATCH)
    assert torch.all(p.var_epistemic > 0) and p.var_aleatoric is None
    assert not any(x.sampling for x in layers)  # switched off again


def test_mc_dropout_with_mean_variance_gives_both_kinds():
    m = model(
        likelihood=GaussianLikelihood(), mc_dropout=FixedRateDropout(0.2), test_passes=5
    ).eval()
    p = m.predict_test(BATCH)
    assert p.var_epistemic is not None and p.var_aleatoric is not None


def test_concrete_dropout_learns_its_rate():
    dropout = LearnedConcreteDropout(rate=0.2)
    m = model(mc_dropout=dropout, test_passes=3)
    m.n_train = 100
    layers = [x for x in m.modules() if isinstance(x, ConcreteDropout)]
    assert len(layers) == 2
    # each layer is paired with the Linear it feeds: backbone's second layer, the head
    assert dropout.weights[0] is m.backbone.net[3].weight
    assert dropout.weights[1] is m.head.net[0].weight
    m.train()
    m(BATCH)  # records the layers' input widths
    reg = dropout.regularization(100)
    reg.backward()
    assert all(x.logit.grad is not None and x.logit.grad != 0 for x in layers)
    assert set(dropout.rates()) == {"dropout_rate/0", "dropout_rate/1"}


def test_mc_dropout_needs_dropout_layers_and_passes_need_dropout():
    class NoDropout(nn.Module):
        out_dim = 4

        def forward(self, batch):
            return batch.x

    with pytest.raises(ValueError, match=r"nn\.Dropout"):
        PropertyRegressor(NoDropout(), torch.optim.Adam, mc_dropout=FixedRateDropout())
    with pytest.raises(ValueError, match="test_passes"):
        model(test_passes=5)
