"""The campaign's acquisition rules and progress measures against known answers: EI
against a numerical integral of the improvement over the normal density (one tail and
both), UCB and greedy by hand, batches by score with ties by mol_id, the pool's top
molecules and recall by counting."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, stats

from oodmol.campaign.acquisition import (
    Objective,
    acquisition_scores,
    expected_improvement,
    greedy,
    select_batch,
    upper_confidence_bound,
)
from oodmol.campaign.progress import best_value, progress, top_molecules

CASES = [(0.0, 1.0, 0.0), (1.3, 0.4, 2.0), (-0.7, 2.5, -1.0), (5.0, 0.3, 1.0), (0.2, 1e-3, 0.1)]


def _integral(gain, mean: float, sigma: float) -> float:
    """∫ gain(y) N(y; μ, σ²) dy over μ ± 12σ, split at μ so the kink is resolved."""
    density = stats.norm(mean, sigma).pdf
    parts = [(mean - 12 * sigma, mean), (mean, mean + 12 * sigma)]
    return sum(
        integrate.quad(lambda y: gain(y) * density(y), a, b, epsabs=1e-13, limit=200)[0]
        for a, b in parts
    )


@pytest.mark.parametrize("mean, sigma, best", CASES)
def test_expected_improvement_is_the_integral_of_the_improvement(mean, sigma, best) -> None:
    expected = _integral(lambda y: max(y - best, 0.0), mean, sigma)
    (value,) = expected_improvement(np.array([mean]), np.array([sigma]), best)
    assert value == pytest.approx(expected, rel=1e-7, abs=1e-10)


def test_expected_improvement_without_uncertainty_is_the_plain_improvement() -> None:
    values = expected_improvement(np.array([3.0, 1.0]), np.array([0.0, 0.0]), 2.0)
    np.testing.assert_array_equal(values, [1.0, 0.0])


@pytest.mark.parametrize("mean, sigma, best", CASES)
def test_lower_values_and_both_tails_improve_as_their_integrals_say(mean, sigma, best) -> None:
    # min: improvement below the lowest known value (utility -y, best utility -best)
    low = acquisition_scores("ei", Objective("min"), np.array([mean]), np.array([sigma]), -best)
    assert low[0] == pytest.approx(
        _integral(lambda y: max(best - y, 0.0), mean, sigma), rel=1e-7, abs=1e-10
    )
    # both: improvement of the distance from the centre over the farthest known distance
    centre, far = 0.5, abs(best) + 0.25
    both = acquisition_scores(
        "ei", Objective("both", centre), np.array([mean]), np.array([sigma]), far
    )
    assert both[0] == pytest.approx(
        _integral(lambda y: max(abs(y - centre) - far, 0.0), mean, sigma), rel=1e-7, abs=1e-10
    )


def test_greedy_and_ucb_by_hand_in_every_direction() -> None:
    mean, sigma = np.array([1.0, -2.0, 0.5]), np.array([0.5, 1.0, 0.0])
    np.testing.assert_array_equal(greedy(mean), mean)
    np.testing.assert_allclose(upper_confidence_bound(mean, sigma, 2.0), [2.0, 0.0, 0.5])
    score = {
        d: acquisition_scores("ucb", Objective(d, 0.25), mean, sigma, 0.0, kappa=2.0)
        for d in ("max", "min", "both")
    }
    np.testing.assert_allclose(score["max"], [2.0, 0.0, 0.5])
    np.testing.assert_allclose(score["min"], [0.0, 4.0, -0.5])
    np.testing.assert_allclose(score["both"], [1.75, 4.25, 0.25])
    both = acquisition_scores("greedy", Objective("both", 0.25), mean, None, 0.0)
    np.testing.assert_allclose(both, [0.75, 2.25, 0.25])


def test_random_scores_are_seeded_and_the_batch_takes_the_best_first() -> None:
    mean = np.zeros(50)
    draw = [
        acquisition_scores("random", Objective(), mean, None, 0.0, rng=np.random.default_rng(s))
        for s in (3, 3, 4)
    ]
    np.testing.assert_array_equal(draw[0], draw[1])
    assert not np.array_equal(draw[0], draw[2])
    scores = np.array([0.2, 0.9, 0.5, 0.9, 0.1])
    ids = np.array([40, 30, 20, 10, 0])
    np.testing.assert_array_equal(select_batch(scores, ids, 3), [3, 1, 2])  # tie: smaller id


def test_rules_refuse_what_they_cannot_score() -> None:
    mean = np.zeros(3)
    with pytest.raises(ValueError, match="needs a predictive σ"):
        acquisition_scores("ei", Objective(), mean, None, 0.0)
    with pytest.raises(ValueError, match="acquisition must be one of"):
        acquisition_scores("thompson", Objective(), mean, None, 0.0)
    with pytest.raises(ValueError, match="seeded random generator"):
        acquisition_scores("random", Objective(), mean, None, 0.0)
    with pytest.raises(ValueError, match="direction must be one of"):
        Objective("up")


def test_top_molecules_count_ties_and_directions() -> None:
    ids = np.arange(10, 20)
    y = np.array([5.0, 1.0, 9.0, 9.0, -3.0, 0.0, 2.0, 7.0, -8.0, 4.0])
    assert top_molecules(ids, y, Objective("max"), 0.01).tolist() == [12]  # ceil, at least 1
    assert top_molecules(ids, y, Objective("max"), 0.3).tolist() == [12, 13, 17]
    assert top_molecules(ids, y, Objective("min"), 0.2).tolist() == [14, 18]
    assert top_molecules(ids, y, Objective("both", 1.0), 0.2).tolist() == [12, 18]
    with pytest.raises(ValueError, match="top_fraction"):
        top_molecules(ids, y, Objective(), 0.0)


def test_progress_counts_recall_and_the_best_values() -> None:
    top = np.array([3, 7, 9, 11])
    facts = progress(
        np.array([1, 3, 9, 20]), np.array([0.5, 4.0, 2.5, -6.0]), top, 3.0, Objective("max")
    )
    assert facts == {
        "n_acquired": 4,
        "best_found": 4.0,
        "best_known": 4.0,
        "n_top_found": 2,
        "n_top": 4,
        "recall": 0.5,
    }
    low = progress(np.array([1]), np.array([0.5]), top, -1.0, Objective("min"))
    assert (low["best_found"], low["best_known"], low["recall"]) == (0.5, -1.0, 0.0)
    assert best_value([1.0, -5.0, 4.0], Objective("both", 1.0)) == -5.0
    assert best_value([], Objective()) is None
