"""Monte Carlo dropout for any network: its dropout layers are swapped for ones that can
stay on at test time, with a fixed rate (Gal & Ghahramani 2016) or a learned one
(Concrete dropout, Gal, Hron & Kendall 2017).

The swap works on whatever `nn.Dropout` layers a backbone and head already have (the
MLP's and the head's `dense_layers` always have them, at rate 0 by default), so no model
needs to know about it. Validation stays deterministic: the layers only sample while
training or inside `sampling()`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

EPS = 1e-7


class MCDropout(nn.Module):
    """Inverted dropout at a fixed rate that also samples while `sampling` is set."""

    def __init__(self, rate: float) -> None:
        super().__init__()
        if not 0 <= rate < 1:
            raise ValueError(f"dropout rate must be in [0, 1), got {rate}")
        self.rate = rate
        self.sampling = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.dropout(x, self.rate, training=self.training or self.sampling)

    def extra_repr(self) -> str:
        return f"rate={self.rate}"


class ConcreteDropout(nn.Module):
    """Dropout whose rate p is a parameter, trained through the Concrete (relaxed
    Bernoulli) mask: drop = sigmoid((log p − log(1−p) + log u − log(1−u)) / t),
    u ~ U(0, 1), t the temperature; x ↦ x (1 − drop) / (1 − p)."""

    def __init__(self, rate: float = 0.1, temperature: float = 0.1) -> None:
        super().__init__()
        if not 0 < rate < 1:
            raise ValueError(f"initial Concrete dropout rate must be in (0, 1), got {rate}")
        self.logit = nn.Parameter(torch.logit(torch.tensor(float(rate))))
        self.temperature = temperature
        self.sampling = False
        self.in_features = 0  # K of the regulariser, seen on the first forward pass

    @property
    def rate(self) -> torch.Tensor:
        return torch.sigmoid(self.logit)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.in_features = x.shape[-1]
        if not (self.training or self.sampling):
            return x
        p = self.rate
        u = torch.rand_like(x)
        drop = torch.sigmoid(
            (
                torch.log(p + EPS)
                - torch.log(1 - p + EPS)
                + torch.log(u + EPS)
                - torch.log(1 - u + EPS)
            )
            / self.temperature
        )
        return x * (1 - drop) / (1 - p)


class FixedRateDropout:
    """Every `nn.Dropout` of the model becomes an `MCDropout` at `rate` (the model's own
    configured rates are replaced, so a model trained without dropout gets some)."""

    def __init__(self, rate: float = 0.1) -> None:
        self.rate = rate
        self.layers: list[nn.Module] = []

    def _new_layer(self) -> nn.Module:
        return MCDropout(self.rate)

    def install(self, model: nn.Module) -> None:
        for name, module in list(model.named_modules()):
            if type(module) is nn.Dropout:
                parent, _, child = name.rpartition(".")
                layer = self._new_layer()
                setattr(model.get_submodule(parent), child, layer)
                self.layers.append(layer)
        if not self.layers:
            raise ValueError(f"MC dropout needs nn.Dropout layers; {type(model).__name__} has none")

    def regularization(self, n_train: int) -> torch.Tensor | float:
        """Extra training loss (none for a fixed rate)."""
        return 0.0

    def rates(self) -> dict[str, float]:
        return {}

    @contextmanager
    def sampling(self) -> Iterator[None]:
        """Inside this block the swapped layers drop units even in eval mode."""
        for layer in self.layers:
            layer.sampling = True
        try:
            yield
        finally:
            for layer in self.layers:
                layer.sampling = False


class LearnedConcreteDropout(FixedRateDropout):
    """Every `nn.Dropout` becomes a `ConcreteDropout` starting at `rate`.

    Training adds, per layer (Gal, Hron & Kendall 2017, their reference code's form):
    w · ||W||² / (1 − p) + d · K · (p log p + (1 − p) log(1 − p)), with w = l² / N and
    d = 2 / N, N the training-set size, l the prior length scale, K the layer's input
    width and W the weight of the first layer after it in the model's module order (the
    layer its output feeds in feed-forward stacks). The entropy term pulls p towards 0.5,
    the data term and the weight term pull it down.
    """

    def __init__(self, rate: float = 0.1, temperature: float = 0.1, length_scale: float = 1e-4):
        super().__init__(rate)
        self.temperature = temperature
        self.length_scale = length_scale
        self.weights: list[nn.Parameter | None] = []

    def _new_layer(self) -> nn.Module:
        return ConcreteDropout(self.rate, self.temperature)

    def install(self, model: nn.Module) -> None:
        super().install(model)
        modules = list(model.modules())
        for layer in self.layers:
            after = modules[modules.index(layer) + 1 :]
            weight = next((m.weight for m in after if isinstance(m, nn.Linear)), None)
            self.weights.append(weight)

    def regularization(self, n_train: int) -> torch.Tensor:
        total = torch.zeros(())
        for layer, weight in zip(self.layers, self.weights, strict=True):
            p = layer.rate
            total = total.to(p.device)
            if weight is not None:
                total = total + self.length_scale**2 / n_train * weight.pow(2).sum() / (1 - p)
            entropy = p * torch.log(p + EPS) + (1 - p) * torch.log(1 - p + EPS)
            total = total + 2.0 / n_train * layer.in_features * entropy
        return total

    def rates(self) -> dict[str, float]:
        return {
            f"dropout_rate/{i}": float(layer.rate.detach()) for i, layer in enumerate(self.layers)
        }
