"""A few optimiser steps of a model on one batch: the shared check that a model learns."""

from __future__ import annotations

import torch
from lightning import LightningModule

from oodmol.data.batches import Batch


def training_losses(
    model: LightningModule, batch: Batch, steps: int, check_grads: bool = True
) -> list[float]:
    """MSE of `model(batch)` against `batch.y` before each of `steps` steps of the
    model's own optimiser. `check_grads` asserts every parameter gets a gradient (DDP
    refuses unused parameters); the dipole variants leave their scalar head unused."""
    optimizer = model.configure_optimizers()
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(batch), batch.y.float())
        loss.backward()
        if check_grads:
            assert all(p.grad is not None for p in model.parameters())
        optimizer.step()
        losses.append(loss.item())
    return losses
