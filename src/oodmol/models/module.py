"""PropertyRegressor: backbone → readout → head, trained on standardised targets."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from oodmol.data.batches import Batch
from oodmol.models.base import Prediction, Regressor
from oodmol.models.heads import RegressionHead
from oodmol.models.optim import build_optimizer
from oodmol.models.prior import AtomReference
from oodmol.models.readout import Readout
from oodmol.models.schedules import build_scheduler
from oodmol.uq.dropout import FixedRateDropout
from oodmol.uq.likelihood import GaussianLikelihood, PointLikelihood
from oodmol.uq.mixture import mixture


class ConfiguredOptimisation:
    """Optimiser, scheduler and gradient clipping from a model's config (partials:
    `optimizer_factory`, `scheduler_factory`, `scheduler_interval`, `parameter_groups`,
    `gradient_clip_norm`), shared by the Lightning modules that train that way."""

    def configure_gradient_clipping(
        self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None
    ) -> None:
        if self.gradient_clip_norm is not None:
            gradient_clip_val, gradient_clip_algorithm = self.gradient_clip_norm, "norm"
        self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def configure_optimizers(self):
        optimizer = build_optimizer(self.optimizer_factory, self, self.parameter_groups)
        if self.scheduler_factory is None:
            return optimizer
        scheduler = build_scheduler(self.scheduler_factory, optimizer, self.trainer)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {
                "scheduler": scheduler,
                "interval": self.scheduler_interval,
                "monitor": "val_loss",
            },
        }


class PropertyRegressor(ConfiguredOptimisation, Regressor):
    """The generic neural model: any backbone, shared readout and head.

    A backbone returns either one vector per molecule, or per-atom vectors with the
    molecule index of each atom (`(h, segment)`), which the readout pools. Optimiser and
    scheduler come from the config as partials (`_partial_: true`); a scheduler factory
    that takes a `trainer` gets it (`oodmol.models.schedules`).

    Uncertainty (the `uq` config group supplies these): `likelihood` chooses a point or a
    mean-variance head; `mc_dropout` makes the dropout layers stochastic at test time,
    where `test_passes` forward passes are combined like ensemble members.

    `gradient_clip_norm` clips the gradients' total norm before every optimiser step, a
    part of some models' published recipes (BOOM's Equivariant Transformer: 0.1), so it
    belongs to the model's config rather than to the trainer's. `parameter_groups` sets
    weight decay, learning-rate factors and frozen parts per parameter
    (`oodmol.models.optim`).

    `atom_reference` (the `AtomReferenceFit` statistic of the training molecules) adds
    fixed per-element offsets to the prediction (`oodmol.models.prior`); the targets are
    then standardised by what the offsets leave of them. `per_atom_loss` divides each
    molecule's error by its number of atoms (MACE's energy loss, for models that sum
    per-atom terms); it needs a point head.

    `compile_backbone` runs the backbone through `torch.compile` (dynamic shapes: every batch has
    its own atom and edge counts). On CPU it fuses the edge-wise elementwise work that
    bounds the message-passing models (bench/roofline.py); compilation costs about a
    minute, so it pays on full epochs, not on a few steps. A string names torch.compile's
    mode instead ("max-autotune"; "reduce-overhead" replays CUDA graphs, which pays on a
    GPU where batch shapes repeat). The compiled callable is kept outside the module tree:
    parameter names, checkpoints and copies are unchanged.
    """

    def __init__(
        self,
        backbone: nn.Module,
        optimizer: Callable[..., torch.optim.Optimizer],
        extensive: bool = False,
        head_hidden: list[int] | None = None,
        head_dropout: float = 0.0,
        scheduler: Callable | None = None,
        scheduler_interval: str = "epoch",
        likelihood: PointLikelihood | GaussianLikelihood | None = None,
        mc_dropout: FixedRateDropout | None = None,
        test_passes: int = 1,
        gradient_clip_norm: float | None = None,
        parameter_groups: dict | None = None,
        atom_reference: dict | None = None,
        per_atom_loss: bool = False,
        compile_backbone: bool | str = False,
    ) -> None:
        super().__init__()
        if test_passes > 1 and mc_dropout is None:
            raise ValueError("test_passes > 1 needs mc_dropout: the passes would be identical")
        self.backbone = backbone
        self.readout = Readout(extensive)
        self.likelihood = likelihood or PointLikelihood()
        if per_atom_loss and not isinstance(self.likelihood, PointLikelihood):
            raise ValueError("per_atom_loss needs a point head, not a mean-variance one")
        self.per_atom_loss = per_atom_loss
        self.prior = None if atom_reference is None else AtomReference(atom_reference["offsets"])
        self.residual_scaling = atom_reference
        self.head = RegressionHead(
            backbone.out_dim, head_hidden, head_dropout, self.likelihood.n_outputs
        )
        self.mc_dropout = mc_dropout
        if mc_dropout is not None:
            mc_dropout.install(self)
        self.test_passes = test_passes
        self.gradient_clip_norm = gradient_clip_norm
        self.n_train = 0
        self.optimizer_factory = optimizer
        self.parameter_groups = parameter_groups
        self.scheduler_factory = scheduler
        self.scheduler_interval = scheduler_interval
        self.compile_backbone = compile_backbone

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state.pop("_compiled_backbone", None)  # rebuilt on first use
        return state

    def _backbone(self) -> Callable[[Batch], torch.Tensor | tuple]:
        """The backbone, or its compiled form with `compile_backbone` (built once, lazily)."""
        if not self.compile_backbone:
            return self.backbone
        if "_compiled_backbone" not in self.__dict__:  # not a registered submodule
            mode = self.compile_backbone if isinstance(self.compile_backbone, str) else None
            compiled = torch.compile(self.backbone, dynamic=True, mode=mode)
            self.__dict__["_compiled_backbone"] = compiled
        return self.__dict__["_compiled_backbone"]

    def setup(self, stage: str) -> None:
        super().setup(stage)
        if stage == "fit":
            self.n_train = len(self.trainer.datamodule.train_targets)

    def fit_target_scaling(self, train_targets) -> None:
        """With an atom reference, the mean and spread of what it leaves of the training
        targets (computed with it, from the training molecules)."""
        if self.prior is None:
            super().fit_target_scaling(train_targets)
            return
        self.y_mean.fill_(self.residual_scaling["residual_mean"])
        self.y_std.fill_(self.residual_scaling["residual_std"])

    def prior_of(self, batch: Batch) -> torch.Tensor | float:
        """The atom reference's part of each molecule's prediction (0 without one)."""
        return 0.0 if self.prior is None else self.prior(batch)

    def forward(self, batch: Batch) -> torch.Tensor:
        """Standardised head output: (B,) for a point head, (B, 2) for mean-variance."""
        out = self._backbone()(batch)
        if isinstance(out, tuple):
            h, segment = out
            out = self.readout(h, segment, len(batch))
        return self.head(out)

    def predict_batch(self, batch: Batch) -> Prediction:
        mean, var = self.likelihood.split(self(batch))
        aleatoric = None if var is None else var * self.y_std**2
        mean = mean * self.y_std + self.y_mean + self.prior_of(batch)
        return Prediction(mean, var_aleatoric=aleatoric)

    def predict_test(self, batch: Batch) -> Prediction:
        if self.test_passes == 1:
            return self.predict_batch(batch)
        with self.mc_dropout.sampling():
            passes = [self.predict_batch(batch) for _ in range(self.test_passes)]
        has_aleatoric = passes[0].var_aleatoric is not None
        mean, epistemic, aleatoric = mixture(
            torch.stack([p.mean for p in passes]),
            aleatoric=torch.stack([p.var_aleatoric for p in passes]) if has_aleatoric else None,
        )
        return Prediction(mean, epistemic, aleatoric)

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        target = (batch.y - self.prior_of(batch) - self.y_mean) / self.y_std
        out = self(batch)
        if self.per_atom_loss:
            atoms = atom_counts(batch).to(out.dtype)
            out, target = out / atoms, target / atoms
        loss = self.likelihood.loss(out, target)
        self.log("train_loss", loss, batch_size=len(target), prog_bar=True)
        # the training set's size is known from setup("fit") on; a step before it (the
        # memory probe's) leaves out the regulariser, a few scalars per dropout layer
        if self.mc_dropout is not None and self.n_train:
            loss = loss + self.mc_dropout.regularization(self.n_train)
            self.log_dict(self.mc_dropout.rates(), batch_size=len(target))
        return loss


def atom_counts(batch: Batch) -> torch.Tensor:
    """The number of atoms of each molecule of a point-cloud batch, [B]."""
    molecule = getattr(batch, "molecule", None)
    if molecule is None:
        raise TypeError(f"per_atom_loss needs atoms (point clouds), not {type(batch).__name__}")
    return torch.bincount(molecule, minlength=len(batch))
