"""The Regression Transformer (model=rt): property prediction as filling in digits.

The property is min–max normalised and written as number tokens into the masked block of
the molecule's sequence (`oodmol.data.rt_tokens`). Training is BOOM's property-only
permutation language modelling: every token of the block is a target, each seeing the
molecule and the block's targets that come before it in a random order (XLNet's
`perm_mask`, `target_mapping`); the loss is their cross-entropy. A prediction is the most
likely token at each place of the block (greedy, in one pass, every target seeing the
molecule only, so predictions are deterministic), read back as a number and
de-normalised.

A decode that is not a number of the block's format (a digit where the point belongs,
as in BOOM's '00913' for 0.913, or a token that is no digit) is *malformed*: it keeps a
finite value, is flagged per molecule (the `malformed` column of predictions.csv) and
counted per set (`malformed` in metrics.json, `test/<set>/malformed` in the loggers).
Its value follows `decode`: "place_value" (the default) sums d·10^p over the digit
tokens, which reads '00913' as 0.913; "boom" reads it as BOOM's evaluation did (the
digits' characters joined and parsed, 913; -1 where that fails).

`normalise_over`: "train" (the default) takes the minimum and maximum of the training
targets; "all" takes them over the training, ID and OOD targets, as BOOM did, which
tells the model the test range.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch.nn import functional as F

from oodmol.data.batches import TokenBatch
from oodmol.data.datamodule import TEST_SETS
from oodmol.data.rt_tokens import BLOCK, FIXED_TOKENS, NUMBER_PLACES, POINT, number_tokens
from oodmol.models.backbones.rt import RTLanguageModel
from oodmol.models.base import Prediction, Regressor
from oodmol.models.module import ConfiguredOptimisation

DECODES = ("place_value", "boom")
_TOKEN_ID = {token: i for i, token in enumerate(FIXED_TOKENS)}


def well_formed(tokens: list[str]) -> bool:
    """Whether `tokens` are a number of the block's format: a digit of each place in
    order, the point in its place."""
    if len(tokens) != len(NUMBER_PLACES):
        return False
    for token, place in zip(tokens, NUMBER_PLACES, strict=True):
        parsed = _digit(token)
        if (token != POINT) if place is None else (parsed is None or parsed[1] != place):
            return False
    return True


def decode_number(tokens: list[str], rule: str = "place_value") -> float:
    """The number a decoded block stands for, under `rule` (see the module's docstring)."""
    if rule == "place_value":
        digits = [_digit(t) for t in tokens]
        return float(sum(d * 10.0**p for d, p in (x for x in digits if x is not None)))
    if rule == "boom":
        leading = []
        for token in tokens:
            if not token.startswith("_"):
                break
            leading.append(token.split("_")[1])
        try:
            return float("".join(leading))
        except ValueError:
            return -1.0
    raise ValueError(f"decode is one of {DECODES}, not {rule!r}")


def _digit(token: str) -> tuple[int, int] | None:
    """(d, p) of a digit token `_d_p_`, None for any other token."""
    parts = token.split("_")
    if len(parts) != 4 or parts[0] or parts[3] or not parts[1].isdigit():
        return None
    return int(parts[1]), int(parts[2])


class RegressionTransformer(ConfiguredOptimisation, Regressor):
    """XLNet's LM head trained to fill in the property's digits (see the module).

    `backbone` is an `RTLanguageModel`; optimiser and scheduler are partials as for
    `PropertyRegressor`, whose `gradient_clip_norm` and `parameter_groups` this shares."""

    def __init__(
        self,
        backbone: RTLanguageModel,
        optimizer: Callable[..., torch.optim.Optimizer],
        scheduler: Callable | None = None,
        scheduler_interval: str = "epoch",
        normalise_over: str = "train",
        decode: str = "place_value",
        gradient_clip_norm: float | None = None,
        parameter_groups: dict | None = None,
    ) -> None:
        super().__init__()
        if normalise_over not in ("train", "all"):
            raise ValueError(f"normalise_over is 'train' or 'all', not {normalise_over!r}")
        if decode not in DECODES:
            raise ValueError(f"decode is one of {DECODES}, not {decode!r}")
        self.backbone = backbone
        self.normalise_over = normalise_over
        self.decode = decode
        self.register_buffer("y_min", torch.zeros(()))
        self.register_buffer("y_range", torch.ones(()))
        self.gradient_clip_norm = gradient_clip_norm
        self.optimizer_factory = optimizer
        self.parameter_groups = parameter_groups
        self.scheduler_factory = scheduler
        self.scheduler_interval = scheduler_interval
        # token by id for decoding: the fixed head; the molecules' tokens are no numbers
        others = backbone.xlnet.config.vocab_size - len(FIXED_TOKENS)
        self.vocabulary = np.array([*FIXED_TOKENS, *["[molecule]"] * others])

    def setup(self, stage: str) -> None:
        super().setup(stage)
        if stage == "fit":
            dm = self.trainer.datamodule
            sets = [dm.train_targets]
            if self.normalise_over == "all":
                sets += [dm.targets(name) for name in TEST_SETS]
            self.fit_range(np.concatenate(sets))

    def fit_range(self, targets: np.ndarray) -> None:
        """The normalisation's minimum and range (1 where the targets are constant)."""
        low, high = float(np.min(targets)), float(np.max(targets))
        self.y_min.fill_(low)
        self.y_range.fill_(high - low if high > low else 1.0)

    def label_ids(self, y: torch.Tensor) -> torch.Tensor:
        """[B, block] token ids of the normalised targets (clamped to [0, 1]: the
        training targets lie there up to rounding)."""
        normalised = ((y.double() - self.y_min) / self.y_range).clamp(0.0, 1.0).tolist()
        ids = [[_TOKEN_ID[t] for t in number_tokens(v)] for v in normalised]
        return torch.tensor(ids, dtype=torch.int64, device=y.device)

    def block_logits(self, batch: TokenBatch, random_order: bool) -> torch.Tensor:
        """[B, block, vocabulary] logits of the number block. `random_order`: each
        target also sees the targets before it in a random order (training); else none."""
        n, length = batch.input_ids.shape
        device = batch.input_ids.device
        in_block = torch.zeros(length, dtype=torch.bool, device=device)
        in_block[BLOCK] = True
        if random_order:
            rank = torch.full((n, length), -1, dtype=torch.int64, device=device)
            places = len(NUMBER_PLACES)
            rank[:, BLOCK] = torch.argsort(torch.rand(n, places, device=device), dim=1)
            hidden = (rank.unsqueeze(2) <= rank.unsqueeze(1)) & in_block
        else:
            hidden = in_block.expand(n, length, length)
        targets = torch.arange(length, device=device)[BLOCK]
        mapping = F.one_hot(targets, length).to(torch.float32).expand(n, -1, -1)
        return self.backbone(
            batch.input_ids, batch.attention_mask, hidden.to(torch.float32), mapping
        )

    def training_step(self, batch: TokenBatch, batch_idx: int) -> torch.Tensor:
        logits = self.block_logits(batch, random_order=True)
        labels = self.label_ids(batch.y)
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten())
        self.log("train_loss", loss, batch_size=len(batch), prog_bar=True)
        return loss

    def predict_batch(self, batch: TokenBatch) -> Prediction:
        ids = self.block_logits(batch, random_order=False).argmax(dim=-1).cpu().numpy()
        decoded = [list(self.vocabulary[row]) for row in ids]
        values = [decode_number(tokens, self.decode) for tokens in decoded]
        malformed = [not well_formed(tokens) for tokens in decoded]
        device = batch.input_ids.device
        normalised = torch.tensor(values, dtype=self.y_min.dtype, device=device)
        return Prediction(
            normalised * self.y_range + self.y_min,
            flags={"malformed": torch.tensor(malformed, device=device)},
        )
