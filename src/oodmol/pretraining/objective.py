"""What a pretraining objective is, and the one the Hugging Face masked-LM models share."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import torch
from torch import nn
from transformers import PreTrainedModel


class PretrainingObjective(Protocol):
    """A module whose forward takes a corrupted batch (the corruption's keyword
    tensors) and returns the loss, and that saves the encoder, in the layout its model's
    `model.pretrained` loads, with whatever else it needs to go on pretraining."""

    def __call__(self, **inputs: torch.Tensor) -> torch.Tensor: ...

    def save_pretrained(self, folder: Path) -> None: ...


class HFMaskedLM(nn.Module):
    """A `transformers` `*ForMaskedLM` model as an objective: the mean cross-entropy of
    the masked tokens (labels -100 elsewhere)."""

    def __init__(self, model: PreTrainedModel) -> None:
        super().__init__()
        self.model = model

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor
    ) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss

    def save_pretrained(self, folder: Path) -> None:
        self.model.save_pretrained(str(folder))
