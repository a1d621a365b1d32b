"""Weight initialisation shared by the 3D models."""

from __future__ import annotations

from torch import nn


def xavier_init_linears(module: nn.Module) -> None:
    """Xavier-uniform weights (Glorot & Bengio, AISTATS 2010) and zero biases for every
    Linear layer in `module`: schnetpack's `Dense` and TorchMD-Net's `reset_parameters`.
    Called once at the end of a model's constructor, so that its output modules, built
    with PyTorch's defaults, follow the model's own scheme."""
    for layer in module.modules():
        if isinstance(layer, nn.Linear):
            nn.init.xavier_uniform_(layer.weight)
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)
