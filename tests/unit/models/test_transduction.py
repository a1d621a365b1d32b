"""Bilinear transduction held to known answers: the anchor search to a brute-force one,
a prediction to the bilinear form of its anchor, the pool and the reference pairs to the
training set (ordered as asked), predictions that never read a target, a loaded state,
and the extrapolation of a property linear in a feature, where an MLP of the same size
does not follow it."""

from __future__ import annotations

from functools import partial

import pytest
import torch

from oodmol.data.batches import VectorBatch
from oodmol.models import transduction
from oodmol.models.backbones.mlp import MLPBackbone
from oodmol.models.module import PropertyRegressor
from oodmol.models.transduction import BilinearTransduction

# tiny tensors (one thread); training steps outside a Trainer, where self.log() has
# nowhere to log
pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.filterwarnings("ignore:You are trying to"),
]

ADAM = partial(torch.optim.Adam, lr=2e-3)


def model(n_train: int, in_dim: int = 3, **settings) -> BilinearTransduction:
    small = {"hidden": 16, "depth": 2, "embedding": 4, **settings}
    return BilinearTransduction(in_dim=in_dim, n_train=n_train, optimizer=ADAM, **small)


def fit(regressor, x: torch.Tensor, y: torch.Tensor, steps: int) -> None:
    """`steps` full-batch steps of the model's own loss and optimiser."""
    regressor.fit_target_scaling(y.numpy())
    optimizer = regressor.configure_optimizers()
    batch = VectorBatch(x=x, y=y, index=torch.arange(len(x)))
    for step in range(steps):
        optimizer.zero_grad()
        regressor.training_step(batch, step).backward()
        optimizer.step()


def predict(regressor, x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
    with torch.no_grad():
        return regressor.predict_batch(VectorBatch(x=x, y=y, index=torch.arange(len(x)))).mean


@pytest.fixture
def fitted() -> tuple[BilinearTransduction, torch.Tensor]:
    """A model drawn and briefly trained on 40 molecules, and 12 others to predict."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(52, 3, generator=generator)
    y = x[:, 0] - 2 * x[:, 1] * x[:, 2]
    torch.manual_seed(0)
    regressor = model(40, reference_pairs=60)
    regressor.draw_reference(x[:40], y[:40])
    fit(regressor, x[:40], y[:40], steps=20)
    return regressor, x[40:]


@pytest.mark.parametrize("anchors", [1, 3])
def test_the_anchors_are_those_closest_to_a_training_difference(
    anchors: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every (anchor, difference) combination tried by hand, in float64: the anchors
    found are those of least min over δ of ‖x − a − δ‖ (up to float32 near-ties), and
    the same whatever the number of molecules searched at a time."""
    generator = torch.Generator().manual_seed(1)
    x_train, y_train = torch.randn(30, 3, generator=generator), torch.randn(30)
    queries = 3 * torch.randn(9, 3, generator=generator)
    regressor = model(30, anchor_pool=20, reference_pairs=50, anchors_per_molecule=anchors)
    regressor.draw_reference(x_train, y_train)
    pool, (first, second) = regressor.pool_x.double(), regressor.pair_index
    differences = pool[second] - pool[first]
    gaps = queries.double()[:, None, None, :] - pool[None, :, None, :] - differences
    closest = gaps.norm(dim=-1).amin(dim=2)  # [queries, pool]
    found = regressor.search(queries)
    assert found.shape == (9, anchors) and len(set(found[0].tolist())) == anchors
    smallest = closest.sort(dim=1).values[:, :anchors]
    assert torch.allclose(closest.gather(1, found), smallest, rtol=1e-5)
    monkeypatch.setattr(transduction, "SEARCH_ELEMENTS", 1)  # one molecule at a time
    assert torch.equal(regressor.search(queries), found)


def test_a_prediction_is_the_bilinear_form_of_its_anchors(fitted) -> None:
    """ŷ = mean over its anchors a of ⟨f(x − a), g(a)⟩, in the property's units."""
    regressor, x = fitted
    regressor.anchors_per_molecule = 2
    chosen = regressor.search(x)
    expected = torch.stack(
        [
            torch.stack(
                [
                    regressor.difference_net(row - regressor.pool_x[a])
                    @ regressor.anchor_net(regressor.pool_x[a])
                    for a in anchors
                ]
            ).mean()
            for row, anchors in zip(x, chosen, strict=True)
        ]
    )
    expected = expected * regressor.y_std + regressor.y_mean
    assert torch.allclose(predict(regressor, x), expected.detach(), atol=1e-5)


@pytest.mark.parametrize("direction", [None, "up", "down"])
def test_the_pool_and_pairs_are_training_molecules_ordered_as_asked(direction) -> None:
    x = torch.arange(50.0)[:, None].repeat(1, 2)  # row i is (i, i)
    y = torch.rand(50, generator=torch.Generator().manual_seed(2))
    regressor = model(50, in_dim=2, anchor_pool=20, reference_pairs=400, direction=direction)
    regressor.draw_reference(x, y)
    rows = regressor.pool_x[:, 0].long()
    assert torch.equal(regressor.pool_x, x[rows]) and len(set(rows.tolist())) == 20
    anchor, target = y[rows[regressor.pair_index]]
    if direction == "up":
        assert (target >= anchor).all()
    elif direction == "down":
        assert (target <= anchor).all()
    else:  # as drawn: both orders
        assert (target > anchor).any() and (target < anchor).any()
    again = model(50, in_dim=2, anchor_pool=20, reference_pairs=400, direction=direction)
    again.draw_reference(x, y)  # the same seed draws the same reference
    assert torch.equal(again.pool_x, regressor.pool_x)
    assert torch.equal(again.pair_index, regressor.pair_index)
    with pytest.raises(ValueError, match="built for 50"):
        regressor.draw_reference(x[:49], y[:49])


def test_predictions_read_no_target_and_no_other_molecule(fitted) -> None:
    """A molecule's prediction is the same with its true target, another, or none, and
    alone or beside others: only its features and the training reference enter."""
    regressor, x = fitted
    alone = torch.cat([predict(regressor, row[None]) for row in x])
    regressor._anchors_of.clear()
    together = predict(regressor, x, y=torch.full((len(x),), 1e6))
    assert torch.allclose(together, alone, atol=1e-6)  # batched products round apart
    assert torch.equal(predict(regressor, x, y=-together), together)
    assert torch.equal(predict(regressor, x), together)


def test_a_loaded_state_predicts_as_the_model_it_was_saved_from(fitted) -> None:
    """The pool and pairs travel in the state dict (the shapes come from the statistics);
    anchors found before loading are forgotten, not reused."""
    regressor, x = fitted
    expected = predict(regressor, x)
    fresh = model(40, reference_pairs=60)
    predict(fresh, x)  # anchors searched in its empty pool
    fresh.load_state_dict(regressor.state_dict())
    assert torch.equal(predict(fresh, x), expected)


def test_settings_that_cannot_work_are_refused() -> None:
    with pytest.raises(ValueError, match="direction='higher'"):
        model(10, direction="higher")
    with pytest.raises(ValueError, match="between 1 and the pool's 10"):
        model(10, anchor_pool=64, anchors_per_molecule=11)


def property_linear_in_x1(n: int, low: float, high: float, generator: torch.Generator):
    """x1 uniform in [low, high], x2 in [0, 1]; y = x1 · (1 + 2 x2): linear in x1, with
    a slope between 1 and 3 that x2 sets."""
    x = torch.rand(n, 2, generator=generator)
    x[:, 0] = low + (high - low) * x[:, 0]
    return x, x[:, 0] * (1 + 2 * x[:, 1])


def test_it_extrapolates_a_property_linear_in_a_feature_where_an_mlp_does_not() -> None:
    """Trained on x1 ∈ [0, 1], tested on x1 ∈ [1.5, 2]: every test molecule is a training
    molecule plus a difference seen between training molecules (Netanyahu et al.'s
    condition), so transduction's RMSE stays small (3.3 % of the test range; 1.5-4.2 %
    over seeds 0-4); an MLP of the same size, trained alike, extends the slopes of its
    training range's edge (8.4 %; 7.7-13.7 %, 2-5 times transduction's)."""
    generator = torch.Generator().manual_seed(0)
    x_train, y_train = property_linear_in_x1(256, 0.0, 1.0, generator)
    x_test, y_test = property_linear_in_x1(200, 1.5, 2.0, generator)
    mean, std = x_train.mean(0), x_train.std(0)  # standardised on training, as VectorFeatures
    x_train, x_test = (x_train - mean) / std, (x_test - mean) / std
    test_range = float(y_test.max() - y_test.min())

    torch.manual_seed(0)
    transducer = model(256, in_dim=2, hidden=32, depth=2, embedding=8)
    transducer.draw_reference(x_train, y_train)
    fit(transducer, x_train, y_train, steps=1500)
    torch.manual_seed(0)
    mlp = PropertyRegressor(backbone=MLPBackbone(2, [48, 48]), optimizer=ADAM)
    fit(mlp, x_train, y_train, steps=1500)
    assert mlp.n_params() == pytest.approx(transducer.n_params(), rel=0.15)

    def rmse(regressor) -> float:
        return float((predict(regressor, x_test) - y_test).pow(2).mean().sqrt())

    assert rmse(transducer) < 0.05 * test_range
    assert rmse(mlp) > 2 * rmse(transducer)
