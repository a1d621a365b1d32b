"""Permutation-language-model pretraining of the Regression Transformer (`oodmol pretrain
model=rt` or `model=rt_regression`, which share the encoder).

XLNet's objective (Yang et al. 2019) as the RT trains it apart from its property task
(`plm_probability` / `max_span_length`, 0.4 / 7 in BOOM's RT configs): spans of the
sequence are the targets, predicted in a random order, each seeing the rest of the
sequence and the targets before it. An unlabelled corpus has no property, so the targets
are spans of the molecule's own SELFIES tokens only. The property block keeps the [MASK]
tokens every RT input has (`oodmol.data.rt_tokens`): the pretrained encoder sees the
input fine-tuning gives it, the block carrying no value in either, and no made-up value
(a zero, say) is learnt as the property of every corpus molecule. The block, [CLS],
`<prop>`, `|`, [SEP], [UNK] and padding are never targets.
"""

from __future__ import annotations

import torch
from tokenizers import Tokenizer
from torch.nn import functional as F

from oodmol.data.rt_tokens import BLOCK, FIXED_TOKENS
from oodmol.models.backbones.rt import RTLanguageModel
from oodmol.pretraining.masking import IGNORE

MOLECULE_START = BLOCK.stop + 1  # the first position after `<prop> block |`


class SpanPermutation:
    """The permutation-LM corruption of a batch of RT sequences (the work of
    `transformers`' DataCollatorForPermutationLanguageModeling, within the molecule).

    Along each molecule's tokens, windows of `int(span / probability)` tokens are laid
    end to end, `span` drawn from 1…`max_span`, and a run of `span` tokens at a random
    offset in each window becomes targets (so about `probability` of the tokens; a
    molecule that got none has one drawn). The targets are ordered at random:
    `perm_mask[b, i, j]` = 1 where j is a target that i may not see, a target ranked at
    or after i (so never itself), or any target when i is no target. `target_mapping`
    [B, T, L] picks the T targets (rows of all zeros pad a molecule with fewer), whose
    `labels` [B, T] are their token ids (-100 for padding rows). The input ids are left
    as they are: XLNet's query stream never sees a target's own token.

    `probability`: `oodmol pretrain`'s `mask_probability` (BOOM's RT configs: 0.4; the
    collators' default 1/6); `max_span`: BOOM's RT configs' 7 (the collators' default 5)."""

    def __init__(self, tokenizer: Tokenizer, probability: float, max_span: int = 7) -> None:
        if not 0 < probability < 1:
            raise ValueError(f"mask_probability={probability} must lie in (0, 1)")
        if max_span < 1:
            raise ValueError(f"max_span={max_span} must be 1 or more")
        if [tokenizer.id_to_token(i) for i in range(len(FIXED_TOKENS))] != list(FIXED_TOKENS):
            raise ValueError("the permutation LM needs a Regression Transformer tokenizer")
        self.probability = probability
        self.max_span = max_span

    def targets(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                generator: torch.Generator) -> torch.Tensor:  # fmt: skip
        """[B, L] bool: the positions to predict (CPU tensors)."""
        n, length = input_ids.shape
        positions = torch.arange(length)
        molecule = (
            attention_mask.bool()
            & (positions >= MOLECULE_START)
            & (input_ids >= len(FIXED_TOKENS))  # the molecules' tokens; [UNK] is in the head
        )
        chosen = torch.zeros_like(molecule)
        for row in range(n):
            where = molecule[row].nonzero().flatten()
            if not len(where):
                continue
            end, cursor = int(where[-1]) + 1, MOLECULE_START
            while cursor < end:
                span = int(torch.randint(1, self.max_span + 1, (1,), generator=generator))
                window = max(span, int(span / self.probability))
                offset = int(torch.randint(0, window - span + 1, (1,), generator=generator))
                chosen[row, cursor + offset : cursor + offset + span] = True
                cursor += window
            chosen[row] &= molecule[row]
            if not chosen[row].any():
                pick = int(torch.randint(len(where), (1,), generator=generator))
                chosen[row, where[pick]] = True
        return chosen

    def __call__(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, generator: torch.Generator
    ) -> dict[str, torch.Tensor]:
        device = input_ids.device
        ids = input_ids.cpu()
        chosen = self.targets(ids, attention_mask.cpu(), generator)
        n, length = ids.shape
        # a random rank among each molecule's targets (0 first); -1 for every other token
        scores = torch.rand(ids.shape, generator=generator).masked_fill(~chosen, 2.0)
        rank = torch.empty_like(ids)
        rank.scatter_(1, scores.argsort(dim=1), torch.arange(length).expand(n, -1))
        rank = rank.masked_fill(~chosen, -1)
        perm_mask = (rank.unsqueeze(2) <= rank.unsqueeze(1)) & chosen.unsqueeze(1)
        # the targets in position order, padded with position `length` (no target)
        where = torch.where(chosen, torch.arange(length), length).sort(dim=1).values
        where = where[:, : int(chosen.sum(dim=1).max())]
        target_mapping = F.one_hot(where, length + 1)[..., :length]
        labels = ids.gather(1, where.clamp(max=length - 1)).masked_fill(where == length, IGNORE)
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "perm_mask": perm_mask.float().to(device),
            "target_mapping": target_mapping.float().to(device),
            "labels": labels.to(device),
        }


class RTPermutationLM(RTLanguageModel):
    """The RT's XLNet LM head model (`RTLanguageModel`, the numeric encodings included)
    as `oodmol pretrain`'s objective: the mean cross-entropy of the targets. Its
    `save_pretrained` folder is what `model.pretrained` loads for model=rt, and, the LM
    head dropped, for model=rt_regression. `pooling` is rt_regression's setting, passed
    with the rest of its backbone's: the LM does not pool."""

    def __init__(self, *args, pooling: str | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)

    def forward(self, labels: torch.Tensor, **inputs: torch.Tensor) -> torch.Tensor:
        """`inputs`: `RTLanguageModel.forward`'s; `labels` [B, targets] (`IGNORE` where
        a molecule has fewer targets)."""
        logits = super().forward(**inputs)
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE)
