"""The significance tests of BOOM's Section 4.7 over a runs folder (the leaderboard's
statistics.html).

- Does the representation matter out of distribution? Kruskal-Wallis across the
  representation groups, per task and over all tasks, and a one-sided Mann-Whitney U for
  each pair of groups, "the earlier group of `representation.ORDER` does better" (BOOM
  Table 8). The score is each run's OOD binned R² (BOOM's headline OOD metric): it is
  unitless, so pooling tasks for the overall test is meaningful, which RMSE is not. Each
  run (model × seed) is one observation, as in BOOM (N = 13 models × 3 seeds = 39).
- Does ID skill predict OOD skill? The distance correlation between seed-mean ID R² and
  OOD binned R² over models, with a permutation test, and a Gaussian process fit of the
  OOD score on the ID score with its band (BOOM Fig. 11).
- Which models err alike? Spearman correlation of their OOD predictions, molecule by
  molecule, with an order from hierarchical clustering.

Only full runs count: a run with a [flag] (subset, external, partial, ...) is not the
same experiment and is left out of every test; so is a model of unknown representation
from the group tests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations, permutations

import numpy as np
import pandas as pd
from scipy.cluster.hierarchy import leaves_list, linkage
from scipy.spatial.distance import squareform
from scipy.stats import kruskal, mannwhitneyu
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Kernel, WhiteKernel

from oodmol.report.representation import ORDER, UNKNOWN, representation
from oodmol.report.tables import flags

SCORE = "ood.binned_pearson_r2"  # BOOM's OOD score (squared Pearson, binned)
ALL_TASKS = "all tasks"


def full_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Runs without a [flag] in their label: the ones the tests may compare."""
    return runs[[not flags(label) for label in runs["model"]]]


def group_scores(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per full run of a known representation with a finite score: benchmark,
    model, representation, score."""
    runs = full_runs(runs)
    scores = runs[["benchmark", "model"]].assign(
        representation=[representation(name) for name in runs["model_name"]],
        score=runs[SCORE].astype(float),
    )
    known = (scores["representation"] != UNKNOWN) & np.isfinite(scores["score"])
    return scores[known].reset_index(drop=True)


def _scopes(scores: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """Each benchmark's scores, then all of them pooled."""
    scopes = [(b, part) for b, part in scores.groupby("benchmark", sort=True)]
    return [*scopes, (ALL_TASKS, scores)]


def _groups(part: pd.DataFrame) -> dict[str, np.ndarray]:
    """Scores per representation present, in ORDER."""
    by = {g: part.loc[part["representation"] == g, "score"].to_numpy() for g in ORDER}
    return {g: values for g, values in by.items() if values.size}


def kruskal_wallis(scores: pd.DataFrame) -> pd.DataFrame:
    """Per benchmark and over all tasks: n runs, the groups compared (with their sizes),
    H and p; H and p are NaN with fewer than two groups or when every score is equal."""
    rows = []
    for scope, part in _scopes(scores):
        groups = _groups(part)
        statistic = p = math.nan
        values = np.concatenate(list(groups.values())) if groups else np.array([])
        if len(groups) >= 2 and np.ptp(values) > 0:
            statistic, p = kruskal(*groups.values())
        rows.append(
            {
                "benchmark": scope,
                "n": int(values.size),
                "groups": ", ".join(f"{g} ({v.size})" for g, v in groups.items()),
                "H": float(statistic),
                "p": float(p),
            }
        )
    return pd.DataFrame(rows)


def mann_whitney_pairs(scores: pd.DataFrame) -> pd.DataFrame:
    """For each benchmark (and all tasks) and each pair of groups present, in ORDER:
    U of the better-named group and the one-sided p of "its scores tend to be higher"."""
    rows = []
    for scope, part in _scopes(scores):
        groups = _groups(part)
        for better, worse in combinations(groups, 2):
            test = mannwhitneyu(groups[better], groups[worse], alternative="greater")
            rows.append(
                {
                    "benchmark": scope,
                    "better": better,
                    "worse": worse,
                    "n_better": int(groups[better].size),
                    "n_worse": int(groups[worse].size),
                    "U": float(test.statistic),
                    "p": float(test.pvalue),
                }
            )
    return pd.DataFrame(
        rows, columns=["benchmark", "better", "worse", "n_better", "n_worse", "U", "p"]
    )


def _centred_distances(x: np.ndarray) -> np.ndarray:
    """Double-centred matrix of |x_i - x_j|."""
    d = np.abs(x[:, None] - x[None, :])
    return d - d.mean(axis=0) - d.mean(axis=1)[:, None] + d.mean()


def distance_correlation(x: np.ndarray, y: np.ndarray) -> float:
    """Székely, Rizzo and Bakirov's (2007) distance correlation of two samples (the
    V-statistic, as `dcor.distance_correlation`): 0 iff independent in the limit, and
    it sees any dependence, not only a linear one. NaN if either sample is constant."""
    a = _centred_distances(np.asarray(x, dtype=float))
    b = _centred_distances(np.asarray(y, dtype=float))
    return _dcor(a, b)


def _dcor(a: np.ndarray, b: np.ndarray) -> float:
    var_x, var_y = (a * a).mean(), (b * b).mean()
    if var_x <= 0 or var_y <= 0:
        return math.nan
    return float(np.sqrt(max((a * b).mean(), 0.0) / np.sqrt(var_x * var_y)))


@dataclass(frozen=True)
class PermutationTest:
    statistic: float
    p: float
    permutations: int
    exact: bool


def distance_correlation_test(
    x: np.ndarray, y: np.ndarray, permutations_max: int = 9999, seed: int = 0
) -> PermutationTest:
    """Permutation test of independence: y is shuffled against x. Every permutation when
    there are at most `permutations_max` (exact: p = share of permutations, identity
    included, whose statistic is at least the observed one, as scipy's
    `permutation_test`); otherwise `permutations_max` random ones, p = (1 + k) / (1 + B)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    a, b = _centred_distances(x), _centred_distances(y)
    observed = _dcor(a, b)
    if math.isnan(observed):
        return PermutationTest(observed, math.nan, 0, False)
    tolerance = 1e-12 * max(abs(observed), 1.0)  # ties count as "at least"
    n = x.size
    if math.factorial(n) <= permutations_max:
        null = [_dcor(a, b[np.ix_(order, order)]) for order in permutations(range(n))]
        hits = sum(value >= observed - tolerance for value in null)
        return PermutationTest(observed, hits / len(null), len(null), True)
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(permutations_max):
        order = rng.permutation(n)
        hits += _dcor(a, b[np.ix_(order, order)]) >= observed - tolerance
    return PermutationTest(observed, (1 + hits) / (1 + permutations_max), permutations_max, False)


def id_ood_points(summary: pd.DataFrame) -> pd.DataFrame:
    """Seed means of full-run models: benchmark, model, id (R²), ood (binned R²)."""
    full = summary["model"].map(lambda m: not flags(m))
    r2 = summary[(summary["metric"] == "r2") & full]
    points = r2.pivot_table(index=["benchmark", "model"], columns="set", values="mean")
    points = points.rename(columns={"ID": "id", "OOD": "ood"}).reset_index()
    if "id" not in points or "ood" not in points:
        return pd.DataFrame(columns=["benchmark", "model", "id", "ood"])
    return points.dropna(subset=["id", "ood"])[["benchmark", "model", "id", "ood"]]


def id_ood_dependence(points: pd.DataFrame, permutations_max: int = 9999) -> pd.DataFrame:
    """Distance correlation of ID and OOD scores per benchmark and over all tasks, with
    its permutation p-value (NaN with fewer than 3 models or a constant score)."""
    rows = []
    for scope, part in _scopes(points):
        test = PermutationTest(math.nan, math.nan, 0, False)
        if len(part) >= 3:
            test = distance_correlation_test(part["id"], part["ood"], permutations_max)
        rows.append(
            {
                "benchmark": scope,
                "n": len(part),
                "dcor": test.statistic,
                "p": test.p,
                "permutations": test.permutations,
                "exact": test.exact,
            }
        )
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class GaussianProcessFit:
    """Posterior mean and predictive standard deviation on a grid of ID scores."""

    grid: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    kernel: Kernel


def gaussian_process_fit(x: np.ndarray, y: np.ndarray, points: int = 200) -> GaussianProcessFit:
    """OOD score on ID score: a constant × RBF kernel plus white noise, hyperparameters
    by maximum marginal likelihood (targets normalised), evaluated on an even grid over
    the observed ID range. The band is the predictive one (noise included): where the
    runs would fall, not only where the mean curve is."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    span = float(np.ptp(x)) or 1.0
    kernel = ConstantKernel(1.0) * RBF(length_scale=span, length_scale_bounds=(span / 100, 1e3))
    kernel += WhiteKernel(noise_level=0.1, noise_level_bounds=(1e-6, 1e1))
    gp = GaussianProcessRegressor(kernel=kernel, normalize_y=True, n_restarts_optimizer=2)
    gp.set_params(random_state=0)
    gp.fit(x[:, None], y)
    grid = np.linspace(x.min(), x.max(), points)
    mean, std = gp.predict(grid[:, None], return_std=True)
    return GaussianProcessFit(grid, mean, std, gp.kernel_)


def prediction_similarity(predictions: pd.DataFrame) -> pd.DataFrame:
    """Spearman ρ between models' OOD predictions of one benchmark, molecule by
    molecule (each model's seed mean per molecule; pairs over the molecules both
    predicted, so a partial file compares on what it has). Square, by model."""
    ood = predictions[predictions["set"] == "ood"]
    table = ood.pivot_table(index="mol_id", columns="model", values="y_pred", aggfunc="mean")
    return table.corr(method="spearman", min_periods=3)


def cluster_order(similarity: pd.DataFrame) -> list[str]:
    """Models in the leaf order of an average-linkage clustering on 1 - ρ (missing ρ
    counted as no similarity), so that models that err alike sit side by side."""
    models = list(similarity.index)
    if len(models) < 3:
        return models
    distance = (1.0 - similarity.fillna(0.0).to_numpy()).clip(0.0, 2.0)
    np.fill_diagonal(distance, 0.0)
    distance = (distance + distance.T) / 2
    order = leaves_list(linkage(squareform(distance, checks=False), method="average"))
    return [models[i] for i in order]


def mean_similarity(matrices: list[pd.DataFrame]) -> pd.DataFrame:
    """Element-wise mean of per-benchmark matrices over the benchmarks a pair shares."""
    if not matrices:
        return pd.DataFrame()
    stacked = pd.concat(matrices, keys=range(len(matrices)))
    return stacked.groupby(level=1).mean().reindex(columns=sorted(stacked.columns)).sort_index()
