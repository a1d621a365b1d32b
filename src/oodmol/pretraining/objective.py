"""What a pretraining objective is, and the one the Hugging Face masked-LM models share."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Protocol

import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel

from oodmol.pretrained import resolve_pretrained


class PretrainingObjective(Protocol):
    """A module whose forward takes a corrupted batch (the corruption's keyword
    tensors) and returns the loss, and that saves the encoder, in the layout its model's
    `model.pretrained` loads, with whatever else it needs to go on pretraining."""

    def __call__(self, **inputs: torch.Tensor) -> torch.Tensor: ...

    def save_pretrained(self, folder: Path) -> None: ...


class HFMaskedLM(nn.Module):
    """A `transformers` `*ForMaskedLM` model (`model_class`) as an objective: the mean
    cross-entropy of the masked tokens (labels -100 elsewhere).

    `pretrained`: a folder or hub id (`oodmol.pretrained`) whose configuration and weights
    are loaded; None builds a randomly initialised model of `new_config(**settings)`
    (`settings`: the backbone's, with the tokenizer's facts)."""

    model_class: ClassVar[type[PreTrainedModel]]

    def __init__(self, pretrained: str | None = None, **settings: int | float | None) -> None:
        super().__init__()
        if pretrained is not None:
            self.model = self.model_class.from_pretrained(str(resolve_pretrained(pretrained)))
        else:
            self.model = self.model_class(self.new_config(**settings))

    def new_config(self, **settings: int | float | None) -> PretrainedConfig:
        """The configuration of a new model with these settings."""
        raise NotImplementedError

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor
    ) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss

    def save_pretrained(self, folder: Path) -> None:
        self.model.save_pretrained(str(folder))
