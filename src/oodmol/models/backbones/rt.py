"""XLNet with the Regression Transformer's numeric encodings (Born & Manica 2023).

Each number token `_d_p_` (`oodmol.data.rt_tokens`) stands for the value v = d·10^p; its
fixed, untrained encoding (v/1, -v/1, v/3, -v/3, v/5, …)·10/vmax (IBM's `FloatEncoding`,
BOOM's copy of it) is added to the token's learnt embedding, so that the model sees the
magnitude of a digit and not only its identity. Every other token's encoding is zero.
The encodings are a function of the fixed head of the RT vocabulary, rebuilt, never
saved: a saved model is a plain XLNet (`save_pretrained`, `from_pretrained`).

`RTEncoder` (model=rt_regression) pools the token states for the shared regression
head; `RTLanguageModel` (model=rt) adds XLNet's LM head, whose logits at the masked
number block are the RT's prediction (`oodmol.models.rt.regression_transformer`).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from transformers import XLNetConfig, XLNetLMHeadModel, XLNetModel

from oodmol.data.batches import TokenBatch
from oodmol.data.rt_tokens import FIXED_TOKENS
from oodmol.pretrained import check_vocabulary, resolve_pretrained


def float_encoding(token: str, dim: int, vmax: float = 1.0) -> torch.Tensor:
    """The numeric encoding of one token: zeros but for a digit token `_d_p_`."""
    if dim % 2:
        raise ValueError(f"the numeric encoding needs an even width, not {dim}")
    parts = token.split("_")
    if len(parts) != 4 or parts[0] or parts[3] or not parts[1].isdigit():
        return torch.zeros(dim)
    value = int(parts[1]) * 10.0 ** int(parts[2])
    odd = torch.arange(1, dim, 2, dtype=torch.float64)  # 1, 3, 5, …
    pairs = torch.stack([value / odd, -value / odd], dim=1).flatten()
    return (pairs / (vmax / 10)).float()


def numeric_encodings(vocab_size: int, dim: int, vmax: float = 1.0) -> torch.Tensor:
    """[vocab_size, dim]: the fixed head's encodings, zeros for the molecules' tokens."""
    table = torch.zeros(vocab_size, dim)
    for i, token in enumerate(FIXED_TOKENS):
        table[i] = float_encoding(token, dim, vmax)
    return table


class _NumericXLNet(nn.Module):
    """An XLNet (`xlnet_class`) built from sizes or loaded from `pretrained`, whose
    input embeddings carry the numeric encodings."""

    xlnet_class: type = XLNetModel

    def __init__(
        self,
        vocab_size: int,
        pad_id: int,
        pretrained: str | None = None,
        layers: int = 32,
        hidden: int = 256,
        heads: int = 16,
        intermediate: int = 1024,
        dropout: float = 0.2,
        vmax: float = 1.0,
    ) -> None:
        super().__init__()
        if pretrained is not None:
            self.xlnet = self.xlnet_class.from_pretrained(str(resolve_pretrained(pretrained)))
            check_vocabulary(vocab_size, self.xlnet.config.vocab_size, pretrained)
        else:
            config = XLNetConfig(
                vocab_size=vocab_size,
                d_model=hidden,
                n_layer=layers,
                n_head=heads,
                d_inner=intermediate,
                dropout=dropout,
                ff_activation="gelu",
                attn_type="bi",
                untie_r=True,
                mem_len=None,
                pad_token_id=pad_id,
                vmax=vmax,
            )
            self.xlnet = self.xlnet_class(config)
        config = self.xlnet.config
        table = numeric_encodings(config.vocab_size, config.d_model, getattr(config, "vmax", vmax))
        self.register_buffer("numeric", table, persistent=False)
        self.out_dim = config.d_model

    @property
    def transformer(self) -> XLNetModel:
        return self.xlnet if isinstance(self.xlnet, XLNetModel) else self.xlnet.transformer

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Learnt token embeddings plus the fixed numeric encodings."""
        return self.transformer.word_embedding(input_ids) + self.numeric[input_ids]

    def save_pretrained(self, folder: str | Path) -> None:
        self.xlnet.save_pretrained(str(folder))


class RTEncoder(_NumericXLNet):
    """The RT's encoder for a regression head: the states of all tokens (padding
    excluded) averaged (`pooling="mean"`) or the first ([CLS], `pooling="first"`)."""

    def __init__(self, *args, pooling: str = "mean", **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if pooling not in ("mean", "first"):
            raise ValueError(f"pooling is 'mean' or 'first', not {pooling!r}")
        self.pooling = pooling

    def forward(self, batch: TokenBatch) -> torch.Tensor:
        mask = batch.attention_mask
        states = self.xlnet(
            inputs_embeds=self.embed(batch.input_ids), attention_mask=mask, use_mems=False
        ).last_hidden_state
        if self.pooling == "first":
            return states[:, 0]
        weights = mask.unsqueeze(-1).to(states.dtype)
        return (states * weights).sum(dim=1) / weights.sum(dim=1)


class RTLanguageModel(_NumericXLNet):
    """XLNet's LM head over the numeric-encoded input (BOOM's `XLNetLMHeadModel`)."""

    xlnet_class = XLNetLMHeadModel

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        perm_mask: torch.Tensor,
        target_mapping: torch.Tensor,
    ) -> torch.Tensor:
        """Logits [B, targets, vocabulary] of the positions `target_mapping` [B,
        targets, L] picks, each seeing what `perm_mask` [B, L, L] (1: i may not see j)
        allows."""
        return self.xlnet(
            inputs_embeds=self.embed(input_ids),
            attention_mask=attention_mask,
            perm_mask=perm_mask,
            target_mapping=target_mapping,
            use_mems=False,
        ).logits
