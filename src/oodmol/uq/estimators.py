"""How a run gets its σ: one class per method, registered by name (`uq.estimator.name`,
with the method's settings beside it).

An estimator says what it needs from the rest of the system, so that nothing else reads
method-specific config fields: keyword arguments for the model's module (a Gaussian
likelihood, MC dropout and its test passes), how many members the run trains, and
whether each member trains on a bootstrap resample. The σ itself comes from the model's
test predictions and from combining members (`oodmol.uq.mixture`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from oodmol.uq.dropout import FixedRateDropout, LearnedConcreteDropout
from oodmol.uq.likelihood import GaussianLikelihood
from oodmol.uq.registry import Registry


@dataclass(frozen=True, kw_only=True)
class Estimator:
    """`members` models make up the run (`uq.members`; more than one are combined);
    `resamples`: each member trains on a bootstrap resample of the training set."""

    members: int = 1
    resamples: ClassVar[bool] = False

    def module_arguments(self) -> dict[str, Any]:
        """Keyword arguments added to the model's module (new objects on every call)."""
        return {}


ESTIMATORS: Registry[Estimator] = Registry("uncertainty estimator")


@ESTIMATORS.register("none")
@dataclass(frozen=True, kw_only=True)
class NativeSigma(Estimator):
    """No method: the model's own σ where it has one (the random forest's spread over its
    trees), scored as method "native"."""


@ESTIMATORS.register("ensemble")
@dataclass(frozen=True, kw_only=True)
class DeepEnsemble(Estimator):
    """Members with different seeds on the full training set (deep ensemble)."""


@ESTIMATORS.register("bootstrap")
@dataclass(frozen=True, kw_only=True)
class BootstrapEnsemble(Estimator):
    """Members on bootstrap resamples of the training set, each drawn with its seed."""

    resamples: ClassVar[bool] = True


@ESTIMATORS.register("mve")
@dataclass(frozen=True, kw_only=True)
class MeanVarianceHead(Estimator):
    """A mean-variance head trained with the Gaussian NLL (variance floor
    `min_variance`, standardised units); neural models only."""

    min_variance: float

    def module_arguments(self) -> dict[str, Any]:
        return {"likelihood": GaussianLikelihood(self.min_variance)}


@ESTIMATORS.register("mc_dropout")
@dataclass(frozen=True, kw_only=True)
class FixedRateMCDropout(Estimator):
    """Every dropout layer at `rate`, in training and in `test_passes` stochastic test
    passes combined like members; neural models only."""

    rate: float
    test_passes: int

    def module_arguments(self) -> dict[str, Any]:
        return {"mc_dropout": FixedRateDropout(self.rate), "test_passes": self.test_passes}


@ESTIMATORS.register("concrete_dropout")
@dataclass(frozen=True, kw_only=True)
class ConcreteMCDropout(FixedRateMCDropout):
    """MC dropout with learned rates, starting at `rate` (Concrete relaxation at
    `temperature`, prior length scale `length_scale` in the regulariser)."""

    temperature: float
    length_scale: float

    def module_arguments(self) -> dict[str, Any]:
        dropout = LearnedConcreteDropout(self.rate, self.temperature, self.length_scale)
        return {"mc_dropout": dropout, "test_passes": self.test_passes}


def estimator_from_config(uq: Mapping | None) -> Estimator:
    """The estimator a `uq` config names, with its settings and `members`; `NativeSigma` for a
    run without a `uq` config. Settings the estimator does not have are refused."""
    if uq is None:
        return NativeSigma()
    settings = dict(uq["estimator"] if "estimator" in uq else _legacy_estimator(uq))
    cls = ESTIMATORS[settings.pop("name")]
    unknown = sorted(set(settings) - {f.name for f in fields(cls)})
    if unknown:
        known = sorted(f.name for f in fields(cls) if f.name != "members")
        raise ValueError(f"uq={uq['name']}: the estimator has no {unknown}; its settings: {known}")
    return cls(members=uq.get("members", 1), **settings)


def _legacy_estimator(uq: Mapping) -> dict[str, Any]:
    """A config written before `uq.estimator` (an older checkpoint's, for evaluate.py):
    the method was `uq.name`, its settings the leaves of the objects in `uq.module`."""
    settings: dict[str, Any] = {"name": uq["name"]}
    for key, value in (uq.get("module") or {}).items():
        if isinstance(value, Mapping):
            settings.update({k: v for k, v in value.items() if k != "_target_"})
        else:
            settings[key] = value
    return settings
