"""Our PaiNN and Equivariant Transformer against their reference implementations,
schnetpack 2.1.1's `representation.PaiNN` and torchmd-net 3.1.0's `TorchMD_ET`, with our
weights copied into them (`schnetpack_state_dict`, `torchmdnet_state_dict`) and the same
neighbour list: scalar and vector atom features, and the gradients of a function of both
with respect to every weight and the positions, in float64.

Neither package is a dependency (schnetpack pins sympy ≤ 1.12 and pulls hydra and
matscipy; torchmd-net's neighbour search is NVIDIA Warp's), so these tests skip where they
are absent: `make test-painn-et-reference` builds `.venv-painn-et` and runs them there.

Compared at the level where the models are the same by design:
- the atom features (the representation), not the predictions: our readout pools the
  hidden units of the per-atom MLP and adds the last Linear's bias once per molecule,
  where schnetpack's `Atomwise` and torchmd-net's `Scalar` add it once per atom;
- both are given our neighbour list (torchmd-net's Warp search is replaced by ours, with
  its self-loops); schnetpack takes any list, capped or not;
- the ET's neighbour embedding gathers from the source and sums at the target of each
  edge, torchmd-net's the other way round: the same on the symmetric graphs of an
  uncapped search, which is what the ET cases use.
"""

from __future__ import annotations

import copy
import importlib.util
from dataclasses import replace

import pytest
import torch
from geometry_helpers import in_double, point_cloud_batch
from torch import nn

from bench import painn_et_reference as bench  # the builders of the references checked here
from oodmol.data.batches import PointCloudBatch
from oodmol.models.backbones.et import EquivariantTransformer, torchmdnet_state_dict
from oodmol.models.backbones.painn import PaiNN, schnetpack_state_dict

pytestmark = pytest.mark.usefixtures("one_thread", "float64")

PAINN = {"painn": {"hidden": 16, "layers": 2}, "painn-capped": {"hidden": 16, "max_neighbors": 4}}
ET = {
    "et": {"hidden": 16, "layers": 2, "heads": 4, "num_rbf": 8},
    "et-plain": {
        "hidden": 16,
        "layers": 2,
        "heads": 2,
        "num_rbf": 8,
        "neighbor_embedding": False,
        "trainable_rbf": True,
    },
}


def close(ours: torch.Tensor, theirs: torch.Tensor) -> None:
    """Equal to 1e-10, or to 1e-10 of the largest entry where that exceeds 1 (gradients
    with respect to positions sum large terms in another order than the reference)."""
    scale = max(1.0, theirs.abs().max().item())
    torch.testing.assert_close(ours, theirs, rtol=0.0, atol=1e-10 * scale)


@pytest.fixture(scope="module")
def batch() -> PointCloudBatch:
    return in_double(point_cloud_batch())


def perturbed(model: nn.Module) -> nn.Module:
    """`model` in float64 with random weights everywhere (zero biases would hide a
    misplaced bias)."""
    torch.manual_seed(1)
    with torch.no_grad():
        for tensor in model.parameters():
            tensor.add_(0.1 * torch.randn_like(tensor))
    return model.double()


def painn_twins(sizes: dict) -> tuple[PaiNN, nn.Module]:
    """Our PaiNN and schnetpack's with our weights."""
    if importlib.util.find_spec("schnetpack") is None:
        pytest.skip("the reference needs `make painn-et-env`")
    torch.manual_seed(0)
    ours = perturbed(PaiNN(**sizes))
    theirs = bench.schnetpack_painn(ours)
    torch.testing.assert_close(theirs.radial_basis.freqs, ours.rbf.frequencies)
    return ours, theirs


def painn_reference(theirs: nn.Module, ours: PaiNN, batch: PointCloudBatch):
    return bench.schnetpack_embed(theirs, ours, batch)


def et_twins(sizes: dict) -> tuple[EquivariantTransformer, nn.Module]:
    """Our ET and torchmd-net's with our weights and our neighbour search."""
    pytest.importorskip("torchmdnet", reason="the reference needs `make painn-et-env`")
    torch.manual_seed(0)
    ours = perturbed(EquivariantTransformer(**sizes))
    return ours, bench.torchmdnet_et(ours)


def et_reference(theirs: nn.Module, ours: EquivariantTransformer, batch: PointCloudBatch):
    return bench.torchmdnet_embed(theirs, ours, batch)


CASES = {
    **{name: (painn_twins, painn_reference, sizes) for name, sizes in PAINN.items()},
    **{name: (et_twins, et_reference, sizes) for name, sizes in ET.items()},
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_same_weights_give_the_same_atom_features(batch, case):
    twins, reference, sizes = CASES[case]
    ours, theirs = twins(sizes)
    with torch.no_grad():
        s, v = ours.embed(batch)
        s_ref, v_ref = reference(theirs, ours, batch)
    assert s.shape == s_ref.shape and v.shape == v_ref.shape
    assert s.abs().max() > 0.1 and v.abs().max() > 0.1  # not a comparison of zeros
    close(s, s_ref)
    close(v, v_ref)


def loss(s: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """A function of every scalar and vector feature whose gradient differs per channel."""
    weights = torch.linspace(-1.0, 1.0, s.shape[-1])
    return (s.sin() * weights).sum() + (v.pow(2) * weights).sum()


@pytest.mark.parametrize("case", ["painn", "et"])
def test_the_same_weights_give_the_same_gradients(batch, case):
    """Gradients with respect to every weight (ours mapped to the reference's names and
    layouts as the weights are) and to the positions."""
    twins, reference, sizes = CASES[case]
    ours, theirs = twins(sizes)
    to_reference = schnetpack_state_dict if case.startswith("painn") else torchmdnet_state_dict

    pos = batch.pos.clone().requires_grad_(True)
    loss(*ours.embed(replace(batch, pos=pos))).backward()
    ours_pos = pos.grad
    pos = batch.pos.clone().requires_grad_(True)
    loss(*reference(theirs, ours, replace(batch, pos=pos))).backward()
    close(ours_pos, pos.grad)

    grads = copy.deepcopy(ours)
    for weight, grad_holder in zip(ours.parameters(), grads.parameters(), strict=True):
        grad_holder.data = weight.grad if weight.grad is not None else torch.zeros_like(weight)
    theirs_grads = {k: p.grad for k, p in theirs.named_parameters() if p.grad is not None}
    ours_grads = to_reference(grads)
    assert theirs_grads.keys() <= ours_grads.keys()
    for key, grad in theirs_grads.items():
        close(ours_grads[key], grad)
