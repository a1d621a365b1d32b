"""ChemBERTa: RoBERTa on SMILES tokens, as `RobertaForSequenceClassification` regresses.

The encoder is Hugging Face's `RobertaModel`; the molecule's vector is the first token's
(<s> or [CLS]) state through the classification head's dropout → dense → tanh → dropout,
and the shared regression head's Linear is that head's `out_proj`. With the same weights
this is `RobertaForSequenceClassification(num_labels=1)` (tests/unit/models/test_models_smiles.py).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import RobertaConfig, RobertaForMaskedLM, RobertaModel

from oodmol.data.batches import TokenBatch
from oodmol.pretrained import check_vocabulary, resolve_pretrained
from oodmol.pretraining.objective import HFMaskedLM


class ChemBERTa(nn.Module):
    """RoBERTa encoder and the dense + tanh half of its sequence-classification head.

    `pretrained`: a folder or hub id (`oodmol.pretrained`) whose configuration and
    weights are loaded; None builds a randomly initialised RoBERTa of the given `sizes`
    (`roberta_config`'s, the hub checkpoint's by default) with the run's vocabulary
    (`vocab_size`, `pad_id`: facts of the fitted tokenizer)."""

    def __init__(
        self, vocab_size: int, pad_id: int, pretrained: str | None = None, **sizes: int | float
    ) -> None:
        super().__init__()
        if pretrained is not None:
            folder = resolve_pretrained(pretrained)
            self.encoder = RobertaModel.from_pretrained(str(folder), add_pooling_layer=False)
            config = self.encoder.config
            check_vocabulary(vocab_size, config.vocab_size, pretrained)
        else:
            config = roberta_config(vocab_size, pad_id, **sizes)
            self.encoder = RobertaModel(config, add_pooling_layer=False)
        drop = config.classifier_dropout
        self.dropout = nn.Dropout(config.hidden_dropout_prob if drop is None else drop)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        nn.init.normal_(self.dense.weight, std=config.initializer_range)  # as RoBERTa's head
        nn.init.zeros_(self.dense.bias)
        self.out_dim = config.hidden_size

    def forward(self, batch: TokenBatch) -> torch.Tensor:
        states = self.encoder(
            input_ids=batch.input_ids, attention_mask=batch.attention_mask
        ).last_hidden_state
        first = self.dropout(states[:, 0])
        return self.dropout(torch.tanh(self.dense(first)))


class ChemBERTaMaskedLM(HFMaskedLM):
    """`RobertaForMaskedLM` with ChemBERTa's settings (the backbone's arguments): what
    `oodmol pretrain model=chemberta` trains, as ChemBERTa itself was pretrained. It saves
    the hub checkpoint's layout, which `model.pretrained` loads (the LM head too, to
    pretrain on); with `pretrained` it goes on from that model and its LM head."""

    model_class = RobertaForMaskedLM

    def new_config(self, **settings: int | float) -> RobertaConfig:
        return roberta_config(**settings)


def roberta_config(
    vocab_size: int,
    pad_id: int,
    layers: int = 6,
    heads: int = 12,
    hidden: int = 768,
    intermediate: int = 3072,
    max_positions: int = 515,
    dropout: float = 0.1,
) -> RobertaConfig:
    """A RoBERTa of these sizes (ChemBERTa's hub checkpoint's by default) over the run's
    vocabulary (ChemBERTa's single segment)."""
    return RobertaConfig(
        vocab_size=vocab_size,
        pad_token_id=pad_id,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        hidden_size=hidden,
        intermediate_size=intermediate,
        max_position_embeddings=max_positions,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
        type_vocab_size=1,
    )
