"""ModernBERT on SMILES tokens, as BOOM trained it from scratch.

Hugging Face's `ModernBertModel` (rotary positions, local attention in a sliding window
with global attention every few layers); the molecule's vector is the mean of its
tokens' states (padding excluded), through `ModernBertPredictionHead` (dense → GELU →
LayerNorm) and dropout; the shared regression head's Linear is the classifier. With the
same weights this is `ModernBertForSequenceClassification(classifier_pooling="mean")`,
the model BOOM's `ModernBertAdapted` re-implements (tests/unit/models/test_models_smiles.py).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import ModernBertConfig, ModernBertForMaskedLM, ModernBertModel
from transformers.models.modernbert.modeling_modernbert import ModernBertPredictionHead

from oodmol.data.batches import TokenBatch
from oodmol.pretrained import check_vocabulary, resolve_pretrained
from oodmol.pretraining.objective import HFMaskedLM


class ModernBERT(nn.Module):
    """ModernBERT encoder, masked mean pooling and its prediction head.

    `pretrained`: a folder or hub id (`oodmol.pretrained`) whose configuration and
    weights are loaded; None builds a randomly initialised model of the given `sizes`
    (`modernbert_config`'s, BOOM's by default) with the run's vocabulary and special-token
    ids (facts of the fitted tokenizer)."""

    def __init__(
        self,
        vocab_size: int,
        pad_id: int,
        cls_id: int | None = None,
        sep_id: int | None = None,
        pretrained: str | None = None,
        **sizes: int | float,
    ) -> None:
        super().__init__()
        if pretrained is not None:
            folder = resolve_pretrained(pretrained)
            self.encoder = ModernBertModel.from_pretrained(str(folder))
            config = self.encoder.config
            check_vocabulary(vocab_size, config.vocab_size, pretrained)
        else:
            config = modernbert_config(vocab_size, pad_id, cls_id, sep_id, **sizes)
            self.encoder = ModernBertModel(config)
        self.head = ModernBertPredictionHead(config)
        self.drop = nn.Dropout(config.classifier_dropout)
        self.out_dim = config.hidden_size

    def forward(self, batch: TokenBatch) -> torch.Tensor:
        mask = batch.attention_mask
        states = self.encoder(input_ids=batch.input_ids, attention_mask=mask).last_hidden_state
        weights = mask.unsqueeze(-1).to(states.dtype)
        pooled = (states * weights).sum(dim=1) / weights.sum(dim=1)
        return self.drop(self.head(pooled))


class ModernBERTMaskedLM(HFMaskedLM):
    """`ModernBertForMaskedLM` with the backbone's settings (`ModernBERT`'s arguments):
    what `oodmol pretrain model=modernbert` trains (ModernBERT's own pretraining
    objective). Its saved folder loads with `model.pretrained` (the encoder; the LM head
    to pretrain on)."""

    model_class = ModernBertForMaskedLM

    def new_config(self, **settings: int | float | None) -> ModernBertConfig:
        return modernbert_config(**settings)


def modernbert_config(
    vocab_size: int,
    pad_id: int,
    cls_id: int | None = None,
    sep_id: int | None = None,
    layers: int = 8,
    heads: int = 12,
    hidden: int = 768,
    intermediate: int = 1152,
    global_every: int = 3,
    local_window: int = 128,
    max_positions: int = 8192,
    classifier_dropout: float = 0.0,
) -> ModernBertConfig:
    """A ModernBERT of these sizes (BOOM's by default) over the run's vocabulary and
    special-token ids, with global attention every `global_every` layers (the first
    included)."""
    return ModernBertConfig(
        vocab_size=vocab_size,
        pad_token_id=pad_id,
        cls_token_id=cls_id,
        bos_token_id=cls_id,
        sep_token_id=sep_id,
        eos_token_id=sep_id,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        hidden_size=hidden,
        intermediate_size=intermediate,
        layer_types=[
            "full_attention" if i % global_every == 0 else "sliding_attention"
            for i in range(layers)
        ],
        local_attention=local_window,
        max_position_embeddings=max_positions,
        classifier_pooling="mean",
        classifier_dropout=classifier_dropout,
    )
