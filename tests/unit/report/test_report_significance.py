"""Known answers for the report's statistics (BOOM Section 4.7): scipy, scikit-learn and
direct formulas on fixed inputs."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import kruskal, mannwhitneyu, permutation_test, spearmanr

from oodmol.report.significance import (
    ALL_TASKS,
    SCORE,
    cluster_order,
    distance_correlation,
    distance_correlation_test,
    gaussian_process_fit,
    group_scores,
    id_ood_dependence,
    kruskal_wallis,
    mann_whitney_pairs,
    prediction_similarity,
)

# OOD binned R² of fixed runs: task -> model -> seeds
SCORES = {
    "csd10k_density": {
        "egnn": [0.61, 0.58, 0.66],
        "painn": [0.52, 0.49, 0.55],
        "chemprop": [0.41, 0.47, 0.44],
        "rf": [0.12, 0.2, 0.15],
        "mlp": [0.3, 0.25, 0.22],
    },
    "qm9_gap": {
        "egnn": [0.7, 0.72, 0.69],
        "painn": [0.75, 0.71, 0.74],
        "chemprop": [0.5, 0.62, 0.55],
        "rf": [0.1, 0.05, 0.08],
        "mlp": [0.2, 0.18, 0.31],
    },
}
GROUP_OF = {"egnn": "3D", "painn": "3D", "chemprop": "graph", "rf": "descriptors"}


def _runs() -> pd.DataFrame:
    rows = [
        {"benchmark": task, "model": model, "model_name": model, SCORE: score}
        for task, models in SCORES.items()
        for model, scores in models.items()
        for score in scores
    ]
    # a subset run (flagged) and a model of unknown representation are never counted
    rows.append(
        {"benchmark": "qm9_gap", "model": "rf [subset]", "model_name": "rf"} | {SCORE: 0.99}
    )
    rows.append(
        {"benchmark": "qm9_gap", "model": "mystery", "model_name": "mystery"} | {SCORE: 0.9}
    )
    return pd.DataFrame(rows)


def _expected_groups(models: dict[str, list[float]]) -> dict[str, list[float]]:
    groups: dict[str, list[float]] = {"3D": [], "graph": [], "descriptors": []}
    for model, scores in models.items():
        groups[GROUP_OF.get(model, "descriptors")] += scores
    return groups


def test_group_scores_keep_full_runs_of_known_representation() -> None:
    scores = group_scores(_runs())
    assert len(scores) == 30  # 2 tasks x 5 models x 3 seeds
    assert set(scores["representation"]) == {"3D", "graph", "descriptors"}
    assert "rf [subset]" not in set(scores["model"]) and "mystery" not in set(scores["model"])


def test_kruskal_wallis_equals_scipy_per_task_and_pooled() -> None:
    table = kruskal_wallis(group_scores(_runs())).set_index("benchmark")
    pooled: dict[str, list[float]] = {"3D": [], "graph": [], "descriptors": []}
    for task, models in SCORES.items():
        groups = _expected_groups(models)
        for name, values in groups.items():
            pooled[name] += values
        expected = kruskal(*groups.values())
        assert table.loc[task, "H"] == pytest.approx(expected.statistic, rel=1e-12)
        assert table.loc[task, "p"] == pytest.approx(expected.pvalue, rel=1e-12)
        assert table.loc[task, "n"] == 15
        assert table.loc[task, "groups"] == "3D (6), graph (3), descriptors (6)"
    expected = kruskal(*pooled.values())
    assert table.loc[ALL_TASKS, "H"] == pytest.approx(expected.statistic, rel=1e-12)
    assert table.loc[ALL_TASKS, "p"] == pytest.approx(expected.pvalue, rel=1e-12)


def test_kruskal_wallis_is_undefined_with_one_group() -> None:
    runs = _runs()
    one_group = runs[runs["model_name"].isin(["egnn", "painn"])]
    table = kruskal_wallis(group_scores(one_group))
    assert table["H"].isna().all() and table["p"].isna().all()


def test_mann_whitney_pairs_are_scipy_one_sided() -> None:
    table = mann_whitney_pairs(group_scores(_runs()))
    density = table[table["benchmark"] == "csd10k_density"]
    assert list(zip(density["better"], density["worse"], strict=True)) == [
        ("3D", "graph"),
        ("3D", "descriptors"),
        ("graph", "descriptors"),
    ]
    groups = _expected_groups(SCORES["csd10k_density"])
    for row in density.itertuples():
        greater = mannwhitneyu(groups[row.better], groups[row.worse], alternative="greater")
        less = mannwhitneyu(groups[row.worse], groups[row.better], alternative="less")
        u_statistic = row.U
        assert u_statistic == pytest.approx(greater.statistic)
        assert row.p == pytest.approx(greater.pvalue, rel=1e-12)
        assert row.p == pytest.approx(less.pvalue, rel=1e-12)  # the same test, mirrored
    # every 3D score of the density task beats every descriptor score: U = 6 * 6
    first = density.set_index(["better", "worse"]).loc[("3D", "descriptors")]
    u_statistic = first["U"]
    assert u_statistic == 36


def _direct_dcor(x: np.ndarray, y: np.ndarray) -> float:
    """Székely et al.'s formula written out with loops (V-statistics)."""
    n = len(x)

    def centred(v: np.ndarray) -> list[list[float]]:
        d = [[abs(v[i] - v[j]) for j in range(n)] for i in range(n)]
        row = [sum(d[i]) / n for i in range(n)]
        total = sum(row) / n
        return [[d[i][j] - row[i] - row[j] + total for j in range(n)] for i in range(n)]

    a, b = centred(x), centred(y)
    cov = sum(a[i][j] * b[i][j] for i in range(n) for j in range(n)) / n**2
    var_x = sum(a[i][j] ** 2 for i in range(n) for j in range(n)) / n**2
    var_y = sum(b[i][j] ** 2 for i in range(n) for j in range(n)) / n**2
    return math.sqrt(cov / math.sqrt(var_x * var_y))


X = np.array([0.91, 0.85, 0.78, 0.95, 0.6, 0.7, 0.88])
Y = np.array([0.41, 0.3, 0.35, 0.52, 0.05, 0.2, 0.33])


def test_distance_correlation_equals_the_direct_formula() -> None:
    assert distance_correlation(X, Y) == pytest.approx(_direct_dcor(X, Y), rel=1e-12)
    # invariant to shifts and scales, 1 for an exact linear relation, NaN for a constant
    assert distance_correlation(3 * X + 1, -2 * Y) == pytest.approx(_direct_dcor(X, Y))
    assert distance_correlation(X, 2 * X - 1) == pytest.approx(1.0)
    assert math.isnan(distance_correlation(X, np.ones_like(X)))


def test_exact_permutation_p_equals_scipy_permutation_test() -> None:
    x, y = X[:5], Y[:5]  # scipy enumerates pairings slowly: 5! = 120 of them
    ours = distance_correlation_test(x, y)
    scipy_test = permutation_test(
        (x, y),
        lambda x, y: distance_correlation(x, y),
        permutation_type="pairings",
        alternative="greater",
        n_resamples=np.inf,
        vectorized=False,
    )
    assert ours.exact and ours.permutations == 120
    assert distance_correlation_test(X, Y).permutations == 5040  # 7!: still exact
    assert ours.statistic == pytest.approx(scipy_test.statistic)
    assert ours.p == pytest.approx(scipy_test.pvalue, rel=1e-12)


def test_random_permutation_p_is_seeded_and_near_the_exact_one() -> None:
    exact = distance_correlation_test(X, Y)
    sampled = distance_correlation_test(X, Y, permutations_max=2000, seed=3)
    again = distance_correlation_test(X, Y, permutations_max=2000, seed=3)
    assert not sampled.exact and sampled.permutations == 2000
    assert sampled.p == again.p
    assert sampled.p == pytest.approx(exact.p, abs=3 * math.sqrt(exact.p / 2000) + 1e-3)
    assert sampled.p >= 1 / 2001


def test_id_ood_dependence_per_task_needs_three_models() -> None:
    points = pd.DataFrame(
        {
            "benchmark": ["a"] * 7 + ["b"] * 2,
            "model": [f"m{i}" for i in range(9)],
            "id": [*X, 0.5, 0.6],
            "ood": [*Y, 0.1, 0.2],
        }
    )
    table = id_ood_dependence(points).set_index("benchmark")
    assert table.loc["a", "dcor"] == pytest.approx(_direct_dcor(X, Y))
    assert math.isnan(table.loc["b", "p"]) and table.loc["b", "n"] == 2
    assert table.loc[ALL_TASKS, "n"] == 9


def test_gaussian_process_band_is_the_closed_form_posterior_of_its_kernel() -> None:
    fit = gaussian_process_fit(X, Y, points=11)
    kernel = fit.kernel
    mean, scale = Y.mean(), Y.std()
    gram = kernel(X[:, None])
    cross = kernel(fit.grid[:, None], X[:, None])
    weights = np.linalg.solve(gram, (Y - mean) / scale)
    expected_mean = mean + scale * cross @ weights
    expected_var = kernel.diag(fit.grid[:, None]) - np.einsum(
        "ij,ji->i", cross, np.linalg.solve(gram, cross.T)
    )
    assert fit.grid[0] == X.min() and fit.grid[-1] == X.max() and len(fit.grid) == 11
    np.testing.assert_allclose(fit.mean, expected_mean, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(fit.std, scale * np.sqrt(expected_var), rtol=1e-5, atol=1e-7)


def test_gaussian_process_follows_a_clear_trend() -> None:
    x = np.linspace(0.0, 1.0, 12)
    y = 0.8 * x - 0.1 + 0.01 * np.sin(17 * x)
    fit = gaussian_process_fit(x, y, points=5)
    np.testing.assert_allclose(fit.mean, 0.8 * fit.grid - 0.1, atol=0.03)
    assert (fit.std < 0.1).all()


def test_prediction_similarity_is_spearman_over_shared_molecules_and_clusters() -> None:
    rng = np.random.default_rng(0)
    truth = rng.normal(size=20)
    frames = []
    for model, noise in (("a", 0.1), ("b", 0.1), ("c", 3.0)):
        for seed in (0, 1):
            frames.append(
                pd.DataFrame(
                    {
                        "mol_id": range(20),
                        "set": "ood",
                        "model": model,
                        "seed": seed,
                        "y_pred": truth + noise * rng.normal(size=20),
                    }
                )
            )
    predictions = pd.concat(frames, ignore_index=True)
    partial = predictions[(predictions["model"] == "a") & (predictions["mol_id"] < 10)]
    predictions = pd.concat([predictions, partial.assign(model="a_partial")])
    similarity = prediction_similarity(predictions)
    means = predictions.groupby(["model", "mol_id"])["y_pred"].mean()
    expected = spearmanr(means["a"], means["c"]).statistic
    assert similarity.loc["a", "c"] == pytest.approx(expected)
    expected = spearmanr(means["a"].iloc[:10], means["b"].iloc[:10]).statistic
    assert similarity.loc["a_partial", "b"] == pytest.approx(expected)
    order = cluster_order(similarity)
    assert order.index("c") in (0, len(order) - 1)  # the odd model sits at an end
