"""PaiNN and the Equivariant Transformer against their frozen copies from before the shared
3D building blocks (`painn_et_reference`): the same seed gives the same initial weights,
and the same weights give the same atom features, outputs (sum and mean readouts, and the
dipole readout), dipole vectors and gradients, to 1e-10 in float64 (relative to a
tensor's largest entry where that exceeds 1: a gradient with respect to the positions sums
terms of up to 1e4 whose sum can be small, and the rewritten models add them in another
order)."""

from __future__ import annotations

from dataclasses import replace

import painn_et_reference as reference
import pytest
import torch
from geometry_helpers import in_double, point_cloud_batch

from oodmol.models.backbones.et import EquivariantTransformer
from oodmol.models.backbones.painn import PaiNN
from oodmol.models.readout import Readout

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = {"hidden": 16, "layers": 2}
VARIANTS = {
    "painn": (reference.PaiNN, PaiNN, TINY),
    "painn-capped": (reference.PaiNN, PaiNN, {**TINY, "max_neighbors": 4}),
    "et": (reference.EquivariantTransformer, EquivariantTransformer, {**TINY, "heads": 4}),
    "et-capped": (
        reference.EquivariantTransformer,
        EquivariantTransformer,
        {**TINY, "heads": 4, "max_neighbors": 4},
    ),
    "et-plain": (
        reference.EquivariantTransformer,
        EquivariantTransformer,
        {**TINY, "heads": 4, "neighbor_embedding": False, "trainable_rbf": True},
    ),
}


def close(ours: torch.Tensor, theirs: torch.Tensor) -> None:
    """Equal to 1e-10, or to 1e-10 of the largest entry where that exceeds 1."""
    scale = max(1.0, theirs.abs().max().item())
    torch.testing.assert_close(ours, theirs, rtol=0.0, atol=1e-10 * scale)


def new_name(old: str) -> str:
    """The rewritten model's name of a reference parameter or buffer: the outputs moved
    to `output_modules` (`output.0.*` → `output.mlp.0.*`, `dipole.*` → `output.*`)."""
    if old.startswith("output."):
        return "output.mlp." + old.removeprefix("output.")
    if old.startswith("dipole."):
        return "output." + old.removeprefix("dipole.")
    return old


def built(variant: str, dipole: bool, seed: int = 0) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The reference and the rewritten model, each built from `seed`."""
    old_class, new_class, sizes = VARIANTS[variant]
    torch.manual_seed(seed)
    old = old_class(**sizes, dipole=dipole)
    torch.manual_seed(seed)
    new = new_class(**sizes, dipole=dipole)
    return old, new


def same_weights(variant: str, dipole: bool) -> tuple[torch.nn.Module, torch.nn.Module]:
    """Both models in float64 with the reference's weights (from another seed than the
    constructors', so the check does not lean on equal initialisation)."""
    old, new = built(variant, dipole)
    torch.manual_seed(1)
    for tensor in old.state_dict().values():
        if tensor.is_floating_point():
            tensor.add_(0.1 * torch.randn_like(tensor))
    new.load_state_dict({new_name(k): v for k, v in old.state_dict().items()})
    return old.double(), new.double()


@pytest.fixture(scope="module")
def batch():
    return in_double(point_cloud_batch())


@pytest.mark.parametrize("dipole", [False, True])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_same_seed_gives_the_same_initial_weights(variant, dipole):
    old, new = built(variant, dipole)
    renamed = {new_name(k): v for k, v in old.state_dict().items()}
    assert renamed.keys() == new.state_dict().keys()
    for key, value in new.state_dict().items():
        assert torch.equal(value, renamed[key]), key


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_same_weights_give_the_same_atom_features_and_readouts(batch, variant):
    old, new = same_weights(variant, dipole=False)
    assert new.out_dim == old.out_dim
    with torch.no_grad():
        for ours, theirs in zip(new.embed(batch), old.embed(batch), strict=True):
            close(ours, theirs)
        (h, segment), (h_ref, segment_ref) = new(batch), old(batch)
        assert torch.equal(segment, segment_ref)
        for extensive in (True, False):
            readout = Readout(extensive)
            close(readout(h, segment, len(batch)), readout(h_ref, segment_ref, len(batch)))


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_same_weights_give_the_same_dipoles(batch, variant):
    old, new = same_weights(variant, dipole=True)
    assert new.out_dim == old.out_dim == 1
    with torch.no_grad():
        close(new(batch), old(batch))
        close(new.dipole_vector(batch), old.dipole_vector(batch))


@pytest.mark.parametrize("dipole", [False, True])
@pytest.mark.parametrize("variant", ["painn", "et"])
def test_the_same_weights_give_the_same_gradients(batch, variant, dipole):
    """Gradients of a sum-pooled output with respect to every weight and the positions."""
    grads = []
    for model in same_weights(variant, dipole):
        pos = batch.pos.clone().requires_grad_(True)
        out = model(replace(batch, pos=pos))
        if not dipole:
            h, segment = out
            out = Readout(extensive=True)(h, segment, len(batch))
        out.pow(2).sum().backward()
        named = {k: p.grad for k, p in model.named_parameters() if p.grad is not None}
        grads.append((named, pos.grad))
    (theirs, theirs_pos), (ours, ours_pos) = grads
    assert ours.keys() == {new_name(k) for k in theirs}
    for key, grad in theirs.items():
        close(ours[new_name(key)], grad)
    close(ours_pos, theirs_pos)
