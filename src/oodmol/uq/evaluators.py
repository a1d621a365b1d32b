"""The uncertainty metrics, registered by name; `uq.evaluators` chooses which ones a run's
metrics.json gets (all by default). Definitions and references: `oodmol.uq.metrics`.

An evaluator returns its entries of one set's section. Those that read the predictive
distribution (`needs_distribution`) are skipped for intervals without one (conformal)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from oodmol.uq.metrics import (
    calibration_verdict,
    coefficient_of_variation,
    ence,
    error_spearman,
    gaussian_nll,
)
from oodmol.uq.registry import Registry
from oodmol.uq.scored_set import ScoredSet


class Evaluator(ABC):
    """One metric (or a pair read together, as the two coverages) of a scored set."""

    needs_distribution: ClassVar[bool] = True

    @abstractmethod
    def evaluate(self, scored: ScoredSet) -> dict[str, float | str]: ...


class CalibrationSummary(Evaluator):
    """Entries (`keys`) of the calibration curve's summaries (`ScoredSet.calibration`),
    which intervals without a predictive distribution have too."""

    needs_distribution = False
    keys: ClassVar[tuple[str, ...]]

    def evaluate(self, scored: ScoredSet) -> dict[str, float | str]:
        return {key: scored.calibration[key] for key in self.keys}


class RankingSummary(Evaluator):
    """Entries (`keys`) of the confidence curve's summaries (`ScoredSet.ranking`)."""

    keys: ClassVar[tuple[str, ...]]

    def evaluate(self, scored: ScoredSet) -> dict[str, float | str]:
        return {key: scored.ranking[key] for key in self.keys}


EVALUATORS: Registry[Evaluator] = Registry("uncertainty evaluator")


@EVALUATORS.register("nll")
class NLL(Evaluator):
    """Mean Gaussian negative log-likelihood: the proper scoring rule, which rewards
    sharpness and calibration at once."""

    def evaluate(self, scored: ScoredSet) -> dict[str, float | str]:
        return {"nll": gaussian_nll(scored.y_true, scored.y_pred, scored.sigma)}


@EVALUATORS.register("spearman")
class Spearman(Evaluator):
    """Spearman ρ(|error|, σ): does a larger σ mean a larger error?"""

    def evaluate(self, scored: ScoredSet) -> dict[str, float | str]:
        return {"spearman": error_spearman(scored.y_true, scored.y_pred, scored.sigma)}


@EVALUATORS.register("miscalibration_area")
class MiscalibrationArea(CalibrationSummary):
    """Area between the calibration curve and the diagonal (AUCE)."""

    keys = ("miscalibration_area",)


@EVALUATORS.register("mce")
class MaximumCalibrationError(CalibrationSummary):
    """Largest gap between observed and expected coverage over the levels."""

    keys = ("mce",)


@EVALUATORS.register("overconfidence")
class Overconfidence(CalibrationSummary):
    """Signed area between diagonal and calibration curve: > 0 for too narrow intervals."""

    keys = ("overconfidence",)


@EVALUATORS.register("coverage")
class Coverage(CalibrationSummary):
    """Observed coverage of the central 68 % and 95 % intervals."""

    keys = ("coverage_68", "coverage_95")


@EVALUATORS.register("ence")
class ENCE(Evaluator):
    """Expected normalised calibration error over σ bins (error-based calibration)."""

    def evaluate(self, scored: ScoredSet) -> dict[str, float | str]:
        return {"ence": ence(*scored.error_bins)}


@EVALUATORS.register("auco")
class AUCO(RankingSummary):
    """Area between the confidence curve and the oracle curve."""

    keys = ("auco",)


@EVALUATORS.register("error_drop")
class ErrorDrop(RankingSummary):
    """Error on all molecules over the error on the 1 % most confident."""

    keys = ("error_drop",)


@EVALUATORS.register("decrease_ratio")
class DecreaseRatio(RankingSummary):
    """Share of steps where dropping the most uncertain molecule does not raise the error."""

    keys = ("decrease_ratio",)


@EVALUATORS.register("cv")
class CoefficientOfVariation(Evaluator):
    """Dispersion of σ: near 0, σ cannot tell molecules apart."""

    def evaluate(self, scored: ScoredSet) -> dict[str, float | str]:
        return {"cv": coefficient_of_variation(scored.sigma)}


@EVALUATORS.register("verdict")
class Verdict(Evaluator):
    """'overconfident', 'underconfident' or 'calibrated', from the signed area."""

    needs_distribution = False

    def evaluate(self, scored: ScoredSet) -> dict[str, float | str]:
        return {"verdict": calibration_verdict(scored.calibration["overconfidence"])}


def evaluate(scored: ScoredSet, names: list[str]) -> dict[str, float | str]:
    """One set's section: its size (where scored by a distribution) and the entries of the
    named evaluators that apply to it, in the order named."""
    section: dict[str, float | str] = (
        {"n": int(scored.y_true.size)} if scored.is_distribution else {}
    )
    for name in names:
        evaluator = EVALUATORS[name]()
        if scored.is_distribution or not evaluator.needs_distribution:
            section.update(evaluator.evaluate(scored))
    return section
