"""Bilinear transduction: a molecule's property predicted from its difference to a
training molecule (its anchor), on any vector representation.

Netanyahu et al., "Learning to Extrapolate: A Transductive Approach" (ICLR 2023), turn
an out-of-support prediction into a combinatorial one: a molecule x beyond the training
set is written as a training molecule a plus a difference Δ = x − a of the kind seen
between training molecules, and the property is predicted as

    ŷ(x) = ⟨f(x − a), g(a)⟩

with f (the difference's embedding) and g (the anchor's) two MLPs of `depth` hidden
layers of `hidden` ReLU units and a linear layer to `embedding` outputs. Each of f and g
then sees inputs from its training range, only their combination is new; that holds
while x − a can be a training difference (a molecule further beyond the training set
than the set is wide leaves f outside its range, where it extrapolates as any network
does). The anchor's
own property does not enter: the bilinear form learns the property itself, not a
change of it. Segal, Netanyahu et al., "Known Unknowns: Out-of-Distribution Property
Prediction in Materials and Molecules" (MatEx, 2025; github.com/learningmatter-mit/matex)
apply it to molecules on RDKit descriptors; the form, the pairs and the anchor search
follow their code:

- **training**: pairs (a, t) of training molecules, drawn at random; the loss is the
  absolute error |⟨f(x_t − x_a), g(x_a)⟩ − y_t| (both papers' L1 loss).
- **the anchor at test time**: among the training molecules, the one whose difference
  x − a lies closest to a difference between two training molecules, argmin over
  (a, δ) of ‖x − a − δ‖, δ in a sample of differences of random training pairs; one
  anchor per molecule. No target of a molecule being predicted is used, nor any
  molecule outside the training set.
- `direction`: MatEx orders every pair, training and reference alike, so that the
  target's property is the higher one (`up`; its OOD set is the top 5 % of the
  property), a privileged knowledge of where the OOD set lies. BOOM's OOD sets are the
  tails of the property's density, often both, so pairs come in either order by default;
  `up` or `down` is MatEx's ordering.

Deviations from the papers, and why:

- **A bounded anchor search.** MatEx compares x − a for every training molecule with
  30·n differences of training pairs (n · 30n distances per molecule). Here a seeded
  pool of at most `anchor_pool` training molecules, and `reference_pairs` differences of
  random pairs among them, bound it to `anchor_pool` × `reference_pairs` operations per
  molecule (the differences of random pool pairs are distributed as those of random
  training pairs). A molecule's anchor depends on its features and the pool, never on
  the weights, so it is searched once and kept: validation every epoch searches again
  only for molecules it has not seen.
- **Pairs within a batch.** Each molecule of a shuffled training batch gets as anchor a
  molecule of the same batch drawn at random: random pairs of training molecules, as
  MatEx draws them, with as many steps per epoch (its epoch is n / batch steps too).
- **Scaling.** Features and targets are standardised on the training set, as for the
  other vector models, so the L1 loss is in standard deviations (MatEx's molecules:
  DeepChem's normalised RDKit descriptors, each in [0, 1], and raw targets).
- **Several anchors** (`anchors_per_molecule` > 1) average the predictions from the
  anchors with the closest differences; the papers use one, the default.
- **Epochs.** MatEx trains 8000 epochs on at most 4,200 molecules; here `max_epochs` and
  the best validation checkpoint, as for every model.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import torch
from torch import nn

from oodmol.data.batches import VectorBatch
from oodmol.data.statistics import Statistic, TrainingSplit
from oodmol.models.base import Prediction, Regressor
from oodmol.models.heads import dense_layers
from oodmol.models.module import ConfiguredOptimisation

DIRECTIONS = (None, "up", "down")
# elements of the anchor search's largest temporary (molecules × pool × pairs): 64 MB in
# float32, whatever the batch
SEARCH_ELEMENTS = 2**24


class TrainingSetSize(Statistic):
    """The number of training molecules, which sets the size of the anchor pool."""

    cached = False

    def compute(self, train: TrainingSplit) -> int:
        return len(train.mol_ids)


def embedding_mlp(in_dim: int, hidden: int, depth: int, embedding: int) -> nn.Sequential:
    """`depth` hidden ReLU layers of `hidden` units, then a linear map to `embedding`."""
    dims = [in_dim, *[hidden] * depth]
    return nn.Sequential(*dense_layers(dims), nn.Linear(dims[-1], embedding))


class BilinearTransduction(ConfiguredOptimisation, Regressor):
    """ŷ(x) = ⟨f(x − a), g(a)⟩ with the anchor a searched among training molecules (see
    the module docstring).

    The anchor pool (`pool_x`) and the reference pairs (`pair_index`, pool positions of
    each pair's anchor and target) are buffers drawn from the training set when fitting
    starts, so a checkpoint predicts without the training data. Their sizes come from
    `n_train` (the `TrainingSetSize` statistic), so a model built from a checkpoint's
    statistics has their shapes before it is loaded.
    """

    def __init__(
        self,
        in_dim: int,
        n_train: int,
        optimizer: Callable[..., torch.optim.Optimizer],
        hidden: int = 256,
        depth: int = 3,
        embedding: int = 64,
        anchor_pool: int = 2048,
        reference_pairs: int = 2048,
        anchors_per_molecule: int = 1,
        direction: str | None = None,
        seed: int = 0,
        scheduler: Callable | None = None,
        scheduler_interval: str = "epoch",
        gradient_clip_norm: float | None = None,
        parameter_groups: dict | None = None,
    ) -> None:
        super().__init__()
        if direction not in DIRECTIONS:
            raise ValueError(f"direction={direction!r}: one of {DIRECTIONS}")
        pool = min(anchor_pool, n_train)
        if pool < 1 or reference_pairs < 1:
            raise ValueError("the anchor pool and the reference pairs must not be empty")
        if not 1 <= anchors_per_molecule <= pool:
            raise ValueError(
                f"anchors_per_molecule={anchors_per_molecule}: between 1 and the pool's "
                f"{pool} training molecules"
            )
        self.difference_net = embedding_mlp(in_dim, hidden, depth, embedding)
        self.anchor_net = embedding_mlp(in_dim, hidden, depth, embedding)
        self.n_train = n_train
        self.anchors_per_molecule = anchors_per_molecule
        self.direction = direction
        self.seed = seed
        self.register_buffer("pool_x", torch.zeros(pool, in_dim))
        self.register_buffer("pair_index", torch.zeros(2, reference_pairs, dtype=torch.long))
        self.optimizer_factory = optimizer
        self.scheduler_factory = scheduler
        self.scheduler_interval = scheduler_interval
        self.gradient_clip_norm = gradient_clip_norm
        self.parameter_groups = parameter_groups
        self._anchors_of: dict[bytes, torch.Tensor] = {}  # features' digest → anchors
        self.register_load_state_dict_post_hook(_forget_anchors)

    def bilinear(self, difference: torch.Tensor, anchor: torch.Tensor) -> torch.Tensor:
        """⟨f(x − a), g(a)⟩ over the last dimension (standardised units)."""
        return (self.difference_net(difference) * self.anchor_net(anchor)).sum(-1)

    def on_fit_start(self) -> None:
        train = self.trainer.datamodule.datasets["train"]
        self.draw_reference(train.x, train.y)

    def draw_reference(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """The anchor pool and the reference pairs, drawn with `seed` from the training
        set's features `x` and targets `y` (the targets only order pairs, with a
        `direction`)."""
        if len(x) != self.n_train:
            raise ValueError(
                f"the training set has {len(x)} molecules, the model was built for {self.n_train}"
            )
        generator = torch.Generator().manual_seed(self.seed)
        pool = torch.randperm(len(x), generator=generator)[: len(self.pool_x)]
        pairs = torch.randint(len(pool), self.pair_index.shape, generator=generator)
        self.pool_x.copy_(x[pool])
        self.pair_index.copy_(self.ordered(pairs, torch.as_tensor(y)[pool]))
        self._anchors_of.clear()

    def ordered(self, pairs: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Pairs (row 0 the anchor, row 1 the target) ordered by `direction`: `up`, the
        target has the higher property; `down`, the lower; none, as drawn."""
        if self.direction is None:
            return pairs
        anchor, target = y[pairs[0]], y[pairs[1]]
        swap = anchor > target if self.direction == "up" else anchor < target
        return torch.where(swap, pairs.flip(0), pairs)

    def training_step(self, batch: VectorBatch, batch_idx: int) -> torch.Tensor:
        """The L1 loss of each molecule's pair with a random molecule of its batch."""
        y = (batch.y - self.y_mean) / self.y_std
        partner = torch.randint(len(batch), (len(batch),), device=y.device)
        pairs = torch.stack([partner, torch.arange(len(batch), device=y.device)])
        anchor, target = self.ordered(pairs, y)
        out = self.bilinear(batch.x[target] - batch.x[anchor], batch.x[anchor])
        loss = torch.mean(torch.abs(out - y[target]))
        self.log("train_loss", loss, batch_size=len(batch), prog_bar=True)
        return loss

    def predict_batch(self, batch: VectorBatch) -> Prediction:
        anchors = self.pool_x[self.anchors(batch.x)]  # [molecules, anchors, features]
        out = self.bilinear(batch.x[:, None, :] - anchors, anchors).mean(1)
        return Prediction(out * self.y_std + self.y_mean)

    def anchors(self, x: torch.Tensor) -> torch.Tensor:
        """Pool positions of each molecule's anchors [molecules, anchors_per_molecule],
        searched for the molecules not seen before (known by a digest of their features:
        a few bytes a molecule, whatever the representation's width)."""
        keys = [
            hashlib.blake2b(row.tobytes(), digest_size=16).digest()
            for row in x.detach().cpu().numpy()
        ]
        new = [i for i, key in enumerate(keys) if key not in self._anchors_of]
        if new:
            found = self.search(x[new]).cpu()
            self._anchors_of.update(zip([keys[i] for i in new], found, strict=True))
        return torch.stack([self._anchors_of[key] for key in keys]).to(x.device)

    @torch.no_grad()
    def search(self, x: torch.Tensor) -> torch.Tensor:
        """The pool positions a of the `anchors_per_molecule` smallest min over δ of
        ‖x − a − δ‖², δ the reference differences, for each row of `x`, by
        ‖a‖² + ‖δ‖² + 2a·δ − 2x·a − 2x·δ (‖x‖² is the same for every a); ties go to
        the first position. In float32 at least, outside any autocast."""
        dtype = torch.promote_types(x.dtype, torch.float32)
        with torch.autocast(x.device.type, enabled=False):
            x, pool = x.to(dtype), self.pool_x.to(dtype)
            differences = pool[self.pair_index[1]] - pool[self.pair_index[0]]
            fixed = (pool * pool).sum(1)[:, None] + (differences * differences).sum(1)
            fixed += 2 * pool @ differences.T  # [pool, pairs]
            to_pool, to_differences = 2 * x @ pool.T, 2 * x @ differences.T
            rows = max(1, SEARCH_ELEMENTS // fixed.numel())
            scores = torch.cat(
                [
                    (fixed - to_differences[start : start + rows, None, :]).amin(2)
                    - to_pool[start : start + rows]
                    for start in range(0, len(x), rows)
                ]
            )
        return torch.argsort(scores, dim=1, stable=True)[:, : self.anchors_per_molecule]


def _forget_anchors(module: BilinearTransduction, incompatible_keys: object) -> None:
    """A loaded pool makes the anchors found before it stale."""
    module._anchors_of.clear()
