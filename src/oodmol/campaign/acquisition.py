"""Which pool molecules to label next: the acquisition rules of a campaign, as small pure
functions of the model's predictive mean μ and standard deviation σ.

Every rule is written for maximisation and returns a score per molecule, higher first.
`Objective` turns the campaign's direction into that form: higher property values
(`max`, the default), lower ones (`min`), or both tails at once (`both`: distance from a
centre, as BOOM's OOD sets are both tails of the property's density).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr

RULES = ("greedy", "ucb", "ei", "random")
NEEDS_SIGMA = frozenset({"ucb", "ei"})
DIRECTIONS = ("max", "min", "both")


def greedy(mean: np.ndarray) -> np.ndarray:
    """Exploitation: the predicted value itself."""
    return np.asarray(mean, dtype=float)


def upper_confidence_bound(mean: np.ndarray, sigma: np.ndarray, kappa: float) -> np.ndarray:
    """Optimism under uncertainty: μ + κσ."""
    return np.asarray(mean, dtype=float) + kappa * np.asarray(sigma, dtype=float)


def expected_improvement(mean: np.ndarray, sigma: np.ndarray, best: float) -> np.ndarray:
    """E[max(Y − best, 0)] for Y ~ N(μ, σ²), in closed form: (μ − best) Φ(z) + σ φ(z) with
    z = (μ − best)/σ; max(μ − best, 0) where σ = 0."""
    mean, sigma = np.asarray(mean, dtype=float), np.asarray(sigma, dtype=float)
    gain = mean - best
    positive = sigma > 0
    safe = np.where(positive, sigma, 1.0)
    z = gain / safe
    density = np.exp(-0.5 * z**2) / np.sqrt(2 * np.pi)
    return np.where(positive, gain * ndtr(z) + safe * density, np.maximum(gain, 0.0))


def random_scores(n: int, rng: np.random.Generator) -> np.ndarray:
    """The control: uniform scores, so the top of them is a uniform random batch."""
    return rng.random(n)


@dataclass(frozen=True)
class Objective:
    """What makes a molecule better: a higher value (`max`), a lower one (`min`), or a
    larger distance from `centre` (`both`)."""

    direction: str = "max"
    centre: float = 0.0

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, got {self.direction!r}")

    def utility(self, y: np.ndarray) -> np.ndarray:
        """A value as the campaign ranks it, higher is better."""
        y = np.asarray(y, dtype=float)
        if self.direction == "max":
            return y
        if self.direction == "min":
            return -y
        return np.abs(y - self.centre)


def acquisition_scores(
    rule: str,
    objective: Objective,
    mean: np.ndarray,
    sigma: np.ndarray | None,
    best: float,
    kappa: float = 2.0,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """Each pool molecule's score under `rule`, higher first; `best` is the best utility
    among the labelled molecules (the incumbent EI improves on).

    For `both`, UCB is |μ − c| + κσ, and EI the sum of the two tails' improvements of the
    distance |Y − c| over `best` (the two events cannot both happen since best ≥ 0)."""
    if rule not in RULES:
        raise ValueError(f"acquisition must be one of {RULES}, got {rule!r}")
    if rule == "random":
        if rng is None:
            raise ValueError("acquisition=random needs a seeded random generator")
        return random_scores(len(mean), rng)
    if rule in NEEDS_SIGMA and sigma is None:
        raise ValueError(f"acquisition={rule} needs a predictive σ")
    if rule == "greedy":
        return greedy(objective.utility(mean))
    if rule == "ucb":
        return upper_confidence_bound(objective.utility(mean), sigma, kappa)
    if objective.direction == "both":
        distance = np.asarray(mean, dtype=float) - objective.centre
        return expected_improvement(distance, sigma, best) + expected_improvement(
            -distance, sigma, best
        )
    sign = 1.0 if objective.direction == "max" else -1.0
    return expected_improvement(sign * np.asarray(mean, dtype=float), sigma, best)


def select_batch(scores: np.ndarray, mol_id: np.ndarray, batch: int) -> np.ndarray:
    """Positions of the `batch` highest scores, best first; equal scores go to the smaller
    mol_id, so a batch never depends on row order."""
    order = np.lexsort((np.asarray(mol_id), -np.asarray(scores, dtype=float)))
    return order[:batch]
