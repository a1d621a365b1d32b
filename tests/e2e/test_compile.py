"""`model.module.compile_backbone=true`: the compiled backbone computes what the eager
one does (outputs and gradients, float64, identical weights), on batches of different
sizes (the dynamic shapes every epoch has), and leaves parameter names and copies as they
were."""

from __future__ import annotations

import copy
from functools import partial

import pytest
import torch
from geometry_helpers import in_double, point_cloud_batch

from oodmol.models.backbones.painn import PaiNN
from oodmol.models.module import PropertyRegressor

pytestmark = pytest.mark.usefixtures("one_thread")

SMILES_SETS = (["CCO", "c1ccccc1O", "CC(=O)N"], ["C1CC1", "OCC(N)C(=O)O"])


def regressor(compile_backbone: bool) -> PropertyRegressor:
    torch.manual_seed(0)
    backbone = PaiNN(hidden=8, layers=1, num_rbf=6)
    optimizer = partial(torch.optim.Adam, lr=1e-3)
    return PropertyRegressor(backbone, optimizer, compile_backbone=compile_backbone).double()


def outputs_and_gradients(model: PropertyRegressor, batch) -> tuple[torch.Tensor, list]:
    model.zero_grad(set_to_none=True)
    out = model(batch)
    out.square().sum().backward()
    return out.detach(), [p.grad.clone() for p in model.parameters()]


def test_compiled_backbone_equals_eager_on_batches_of_different_sizes():
    eager, compiled = regressor(False), regressor(True)
    for smiles in SMILES_SETS:
        batch = in_double(point_cloud_batch(smiles))
        out, grads = outputs_and_gradients(eager, batch)
        out_c, grads_c = outputs_and_gradients(compiled, batch)
        torch.testing.assert_close(out_c, out, rtol=0, atol=1e-10)
        for grad_c, grad in zip(grads_c, grads, strict=True):
            torch.testing.assert_close(grad_c, grad, rtol=0, atol=1e-10)
    assert list(compiled.state_dict()) == list(eager.state_dict())
    copied = copy.deepcopy(compiled)  # as EMA and SWA copy a model
    torch.testing.assert_close(copied(batch), compiled(batch), rtol=0, atol=0)


@pytest.mark.parametrize("setting, mode", [(True, None), ("reduce-overhead", "reduce-overhead")])
def test_a_compile_mode_is_handed_to_torch_compile(setting, mode, monkeypatch):
    """`compile_backbone: reduce-overhead` (CUDA graphs on a GPU) reaches torch.compile."""
    seen = {}

    def record(module, **options):
        seen.update(options)
        return module

    monkeypatch.setattr(torch, "compile", record)
    model = regressor(False)
    model.compile_backbone = setting
    model(in_double(point_cloud_batch(SMILES_SETS[1])))
    assert seen == {"dynamic": True, "mode": mode}
