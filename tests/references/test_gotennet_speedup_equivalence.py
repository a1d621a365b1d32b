"""GotenNet against its frozen copy from before it was made faster
(`gotennet_speedup_reference`): the same seed gives the same initial weights, and the same
weights (loaded through the state dict, so its keys stay the same) give the same atom
features, outputs, weight and position gradients, to 1e-10 in float64, on a batch of
several molecules; in training mode too, attention dropout drawing the same masks."""

from __future__ import annotations

from dataclasses import replace

import gotennet_speedup_reference as reference
import pytest
import torch
from geometry_helpers import in_double, point_cloud_batch

from oodmol.models.backbones.gotennet import GotenNet
from oodmol.models.readout import Readout

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = {"hidden": 16, "layers": 3, "heads": 4, "num_rbf": 8, "output_hidden": 8}
VARIANTS = {
    "default": TINY,
    "capped": {**TINY, "max_neighbors": 4},
    "lmax1": {**TINY, "lmax": 1},
    "lmax3": {**TINY, "lmax": 3, "layers": 2},
}
EXACT = {"rtol": 0.0, "atol": 1e-10}


def same_weights(sizes: dict) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The frozen and the live model in float64 with the frozen one's weights (perturbed
    away from the constructors' initialisation, which zeroes the biases)."""
    torch.manual_seed(0)
    old = reference.GotenNet(**sizes)
    torch.manual_seed(0)
    new = GotenNet(**sizes)
    torch.manual_seed(1)
    for tensor in old.state_dict().values():
        if tensor.is_floating_point():
            tensor.add_(0.1 * torch.randn_like(tensor))
    new.load_state_dict(old.state_dict())
    return old.double(), new.double()


@pytest.fixture(scope="module")
def batch():
    return in_double(point_cloud_batch())


def test_the_same_seed_gives_the_same_initial_weights():
    torch.manual_seed(0)
    old = reference.GotenNet(**TINY).state_dict()
    torch.manual_seed(0)
    new = GotenNet(**TINY).state_dict()
    assert new.keys() == old.keys()
    for key, value in new.items():
        assert torch.equal(value, old[key]), key


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_same_weights_give_the_same_features_outputs_and_gradients(batch, variant):
    """Eval mode: h and X, the summed readout, and the gradients of its square with
    respect to every weight and to the positions."""
    results = []
    for model in same_weights(VARIANTS[variant]):
        model.eval()
        with torch.no_grad():
            features = model.embed(batch)
        pos = batch.pos.clone().requires_grad_(True)
        h, segment = model(replace(batch, pos=pos))
        out = Readout(extensive=True)(h, segment, len(batch))
        out.pow(2).sum().backward()
        grads = {k: p.grad for k, p in model.named_parameters() if p.grad is not None}
        results.append((features, out, grads, pos.grad))
    (old_features, old_out, old_grads, old_pos), (features, out, grads, pos_grad) = results
    for ours, theirs in zip(features, old_features, strict=True):
        torch.testing.assert_close(ours, theirs, **EXACT)
    assert old_features[1].abs().max() > 1e-3  # the steerable features are not trivially 0
    torch.testing.assert_close(out, old_out, **EXACT)
    assert grads.keys() == old_grads.keys()
    assert len(grads) == len(dict(same_weights(VARIANTS[variant])[0].named_parameters()))
    for key, grad in old_grads.items():
        torch.testing.assert_close(grads[key], grad, **EXACT, msg=key)
    torch.testing.assert_close(pos_grad, old_pos, **EXACT)


def test_training_mode_draws_the_same_dropout_and_gradients(batch):
    sizes = {**TINY, "attn_dropout": 0.3}
    results = []
    for model in same_weights(sizes):
        model.train()
        torch.manual_seed(7)
        h, segment = model(batch)
        Readout(extensive=False)(h, segment, len(batch)).sum().backward()
        results.append((h, {k: p.grad for k, p in model.named_parameters()}))
    (old_h, old_grads), (h, grads) = results
    torch.testing.assert_close(h, old_h, **EXACT)
    for key, grad in old_grads.items():
        torch.testing.assert_close(grads[key], grad, **EXACT, msg=key)
