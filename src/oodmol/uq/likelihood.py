"""What the head predicts and how it is scored: a point (MSE) or a Gaussian (mean-variance
estimation, Nix & Weigend 1994), chosen by config, so every neural model can have either.

All values are in standardised target units; PropertyRegressor converts to property units.
"""

from __future__ import annotations

import torch
from torch import nn


class PointLikelihood:
    """One output, the mean; trained with the mean squared error."""

    n_outputs = 1

    def split(self, out: torch.Tensor) -> tuple[torch.Tensor, None]:
        return out, None

    def loss(self, out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return nn.functional.mse_loss(out, target)


class AbsoluteErrorLikelihood(PointLikelihood):
    """One output, the mean; trained with the mean absolute error (MoLFormer's
    fine-tuning loss)."""

    def loss(self, out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return nn.functional.l1_loss(out, target)


class GaussianLikelihood:
    """Two outputs, mean and variance; trained with the Gaussian negative log-likelihood.

    The variance is softplus(raw) + min_variance: softplus keeps it positive with a
    gradient everywhere, the floor keeps 1/σ² in the loss finite when the network tries
    to shrink σ to zero on training points it fits exactly.
    """

    n_outputs = 2

    def __init__(self, min_variance: float = 1e-6) -> None:
        if min_variance <= 0:
            raise ValueError(f"min_variance must be positive, got {min_variance}")
        self.min_variance = min_variance

    def split(self, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return out[..., 0], nn.functional.softplus(out[..., 1]) + self.min_variance

    def loss(self, out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        mean, var = self.split(out)
        return nn.functional.gaussian_nll_loss(mean, target, var, full=True, eps=0.0)
