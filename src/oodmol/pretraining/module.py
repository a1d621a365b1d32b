"""The Lightning module and loaders of `oodmol pretrain`: an objective trained on
corrupted batches of the corpus, its loss on a held-out part measured with the same
corruption every time."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

import lightning as L
import numpy as np
import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR
from torch.utils.data import DataLoader

from oodmol.data.batches import TokenBatch
from oodmol.data.sampling import EpochShuffle
from oodmol.data.tokens import TokenSet

Corruption = Callable[[torch.Tensor, torch.Tensor, torch.Generator], dict[str, torch.Tensor]]
LOSS_WINDOW = 100  # training steps whose mean loss the summary reports


def generator(*seed: int) -> torch.Generator:
    """A CPU generator seeded from a tuple (the run's seed, a stream, a step)."""
    state = np.random.SeedSequence(list(seed)).generate_state(1, np.uint64)
    return torch.Generator().manual_seed(int(state[0]))


class Pretraining(L.LightningModule):
    """`objective(**corruption(batch))` is the loss. A training step's corruption is
    drawn from (seed, step), so a resumed run draws what an uninterrupted one would;
    a validation batch's from (seed, batch), the same at every validation. AdamW with
    a linear warm-up over `warmup_fraction` of the run's steps, then cosine decay to 0."""

    def __init__(
        self,
        objective: nn.Module,
        corruption: Corruption,
        lr: float,
        weight_decay: float,
        warmup_fraction: float,
        seed: int,
    ) -> None:
        super().__init__()
        self.objective = objective
        self.corruption = corruption
        self.lr = lr
        self.weight_decay = weight_decay
        self.warmup_fraction = warmup_fraction
        self.seed = seed
        self.recent: deque[float] = deque(maxlen=LOSS_WINDOW)

    def _loss(self, batch: TokenBatch, draws: torch.Generator) -> torch.Tensor:
        return self.objective(**self.corruption(batch.input_ids, batch.attention_mask, draws))

    def training_step(self, batch: TokenBatch, batch_idx: int) -> torch.Tensor:
        loss = self._loss(batch, generator(self.seed, 0, self.global_step))
        self.recent.append(float(loss.detach()))
        self.log("train_loss", loss, prog_bar=True, batch_size=len(batch))
        return loss

    def validation_step(self, batch: TokenBatch, batch_idx: int) -> None:
        loss = self._loss(batch, generator(self.seed, 1, batch_idx))
        self.log("val_loss", loss, prog_bar=True, batch_size=len(batch))

    def recent_train_loss(self) -> float | None:
        """The mean training loss of the last `LOSS_WINDOW` steps (None before any)."""
        return float(np.mean(self.recent)) if self.recent else None

    def configure_optimizers(self) -> dict:
        decay = [p for n, p in self.named_parameters() if p.ndim >= 2 and "embed" not in n]
        rest = [p for n, p in self.named_parameters() if not (p.ndim >= 2 and "embed" not in n)]
        optimizer = torch.optim.AdamW(
            [
                {"params": decay, "weight_decay": self.weight_decay},
                {"params": rest, "weight_decay": 0.0},
            ],
            lr=self.lr,
            betas=(0.9, 0.98),
            eps=1e-6,
        )
        total = max(1, int(self.trainer.estimated_stepping_batches))
        warmup = max(1, round(self.warmup_fraction * total))

        def factor(step: int) -> float:
            if step < warmup:
                return (step + 1) / warmup
            progress = min(1.0, (step - warmup) / max(1, total - warmup))
            return 0.5 * (1.0 + math.cos(math.pi * progress))

        schedule = LambdaLR(optimizer, factor)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


def train_loader(
    tokens: TokenSet, batch_size: int, seed: int, collate: Callable, workers: int = 0
) -> DataLoader:
    """Shuffled per (seed, epoch), molecules of similar length batched together."""
    shuffle = EpochShuffle(tokens, seed, lengths=tokens.lengths, batch_size=batch_size)
    return DataLoader(
        tokens, batch_size=batch_size, sampler=shuffle, collate_fn=collate, num_workers=workers
    )


def eval_loader(tokens: TokenSet, batch_size: int, collate: Callable) -> DataLoader:
    """Shortest molecules first: fixed batches, little padding."""
    order = np.argsort(tokens.lengths, kind="stable").tolist()
    return DataLoader(tokens, batch_size=batch_size, sampler=order, collate_fn=collate)
