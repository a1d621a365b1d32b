"""The order in which training molecules are drawn, made resumable.

A resumed run must draw the batches an uninterrupted run draws. PyTorch's RandomSampler
takes each epoch's permutation from the global random generator, which the model's
dropout also consumes, and after a restart always begins an epoch at its first batch. Here
an epoch's order depends on the run's seed and the epoch number alone, and an epoch can
begin part-way through, after the batches a checkpoint says were already trained.
"""

from __future__ import annotations

from collections.abc import Iterator, Sized

import numpy as np
import torch
from torch.utils.data import DistributedSampler


class EpochShuffle(DistributedSampler):
    """A permutation of the training set per (seed, epoch), shared out across processes.

    A `DistributedSampler` so that Lightning keeps it under DDP, where it would wrap any
    other sampler: each of `num_replicas` processes draws every `num_replicas`-th index
    of the epoch's permutation (the last indices repeat to make the shares equal, as in
    `DistributedSampler`). `resume_at(epoch, skip)` starts the next iteration at index
    `skip` of this process's share of that epoch.

    With `lengths` (and `batch_size`), molecules of similar length share a batch: the
    share is cut into windows of `WINDOW` batches, each sorted by length and cut into
    batches, and the full batches are shuffled (a last, partial one stays last, so batch
    boundaries stay where the loader cuts). Padding then costs little (token models).
    """

    WINDOW = 50  # batches sorted together: long enough to group, short enough to mix

    def __init__(
        self,
        dataset: Sized,
        seed: int,
        num_replicas: int = 1,
        rank: int = 0,
        lengths: np.ndarray | None = None,
        batch_size: int | None = None,
        weights: np.ndarray | None = None,
    ) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=True, seed=seed)
        if lengths is not None and not batch_size:
            raise ValueError("grouping by length needs the batch size")
        if weights is not None and len(weights) != len(dataset):
            raise ValueError(f"{len(weights)} weights for {len(dataset)} molecules")
        self.weights = None if weights is None else torch.as_tensor(weights, dtype=torch.float64)
        self.lengths = lengths
        self.batch_size = batch_size
        self.skip = 0

    def resume_at(self, epoch: int, skip: int) -> None:
        self.set_epoch(epoch)
        self.skip = skip

    def __iter__(self) -> Iterator[int]:
        # seeds (s, e) and (s + 1, e - 1) must not share a permutation, as they would with
        # DistributedSampler's seed + epoch
        state = np.random.SeedSequence([self.seed, self.epoch]).generate_state(1, np.uint64)
        generator = torch.Generator().manual_seed(int(state[0]))
        n = len(self.dataset)
        if self.weights is None:
            order = torch.randperm(n, generator=generator).tolist()
        else:
            order = torch.multinomial(self.weights, n, replacement=True, generator=generator)
            order = order.tolist()
        order += order[: self.total_size - len(order)]
        share = order[self.rank : self.total_size : self.num_replicas]
        if self.lengths is not None:
            share = self._grouped_by_length(share, generator)
        skip, self.skip = self.skip, 0
        return iter(share[skip:])

    def _grouped_by_length(self, share: list[int], generator: torch.Generator) -> list[int]:
        size = self.batch_size
        window = size * self.WINDOW
        batches = []
        for start in range(0, len(share), window):
            chunk = sorted(share[start : start + window], key=lambda i: self.lengths[i])
            batches += [chunk[b : b + size] for b in range(0, len(chunk), size)]
        full = [b for b in batches if len(b) == size]
        partial = [b for b in batches if len(b) < size]
        shuffled = [full[i] for i in torch.randperm(len(full), generator=generator).tolist()]
        return [i for batch in [*shuffled, *partial] for i in batch]
