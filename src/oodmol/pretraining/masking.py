"""BERT's masked-language-model corruption of a batch of token ids."""

from __future__ import annotations

import torch
from tokenizers import Tokenizer

from oodmol.data.tokens import MASK, SPECIAL_TOKENS, special_id

IGNORE = -100  # the label of a token the loss leaves out (PyTorch's cross-entropy default)


class BertMasking:
    """Each ordinary token (not padding, not a special token) is chosen with
    `probability`; a chosen token is labelled with its id and replaced by [MASK] 80 % of
    the time, by a random ordinary token 10 %, and left as it is 10 %. Every other
    label is -100. A molecule none of whose tokens was drawn gets one chosen at random,
    so that every molecule, and every batch, has a finite loss.

    Special tokens are the tokenizer's ([PAD], [CLS], … or RoBERTa's <pad>, <s>, …, and
    any it marks special); random replacements are drawn from the ordinary ones."""

    def __init__(self, tokenizer: Tokenizer, probability: float) -> None:
        if not 0 < probability < 1:
            raise ValueError(f"mask_probability={probability} must lie in (0, 1)")
        self.probability = probability
        self.mask_id = special_id(tokenizer, MASK)
        if self.mask_id is None:
            raise ValueError(
                "masked-language modelling needs a [MASK] token; the tokenizer has none"
            )
        named = {special_id(tokenizer, token) for token in SPECIAL_TOKENS}
        marked = {i for i, added in tokenizer.get_added_tokens_decoder().items() if added.special}
        self.special_ids = torch.as_tensor(sorted((named | marked) - {None}), dtype=torch.int64)
        ordinary = torch.ones(tokenizer.get_vocab_size(), dtype=torch.bool)
        ordinary[self.special_ids] = False
        self.ordinary_ids = ordinary.nonzero().flatten()
        if not len(self.ordinary_ids):
            raise ValueError("the vocabulary has no ordinary tokens to mask")

    def __call__(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, generator: torch.Generator
    ) -> dict[str, torch.Tensor]:
        """`input_ids` corrupted, `attention_mask` as it is, and `labels`; the draws come
        from `generator` (a CPU generator: the same masks on every device)."""
        device = input_ids.device
        ids = input_ids.cpu()
        maskable = attention_mask.cpu().bool() & ~torch.isin(ids, self.special_ids)
        chosen = (torch.rand(ids.shape, generator=generator) < self.probability) & maskable
        empty = ~chosen.any(dim=1) & maskable.any(dim=1)
        if empty.any():  # one random maskable token of each molecule none was drawn from
            scores = torch.rand(ids.shape, generator=generator).masked_fill(~maskable, -1.0)
            rows = empty.nonzero().flatten()
            chosen[rows, scores[rows].argmax(dim=1)] = True
        labels = torch.where(chosen, ids, torch.full_like(ids, IGNORE))
        action = torch.rand(ids.shape, generator=generator)
        masked = chosen & (action < 0.8)
        replaced = chosen & (action >= 0.8) & (action < 0.9)
        draws = torch.randint(len(self.ordinary_ids), ids.shape, generator=generator)
        corrupted = torch.where(masked, torch.full_like(ids, self.mask_id), ids)
        corrupted = torch.where(replaced, self.ordinary_ids[draws], corrupted)
        return {
            "input_ids": corrupted.to(device),
            "attention_mask": attention_mask,
            "labels": labels.to(device),
        }
