"""The "uq" and "uq_recalibrated" sections of metrics.json, and the σ columns of
predictions.csv, as `write_results` writes them, against a small independent reference:
every metric and recalibration written out again below in plain Python (loops, `math`,
`statistics.NormalDist`, integer arithmetic for the conformal rank), from the formulas in
the docstrings of `oodmol.uq.metrics` and `oodmol.uq.recalibrate`."""

from __future__ import annotations

import json
import math
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pandas as pd
import pytest

from oodmol.predictions import SetPredictions
from oodmol.run_record import RunRecord
from oodmol.scoring.results import write_results
from oodmol.uq.calibrators import CONFORMAL_NOTE
from oodmol.uq.evaluators import EVALUATORS, evaluate
from oodmol.uq.metrics import calibration_verdict, uncertainty_metrics
from oodmol.uq.scored_set import ScoredSet

FLOOR = 1e-12
PERCENTS = range(1, 101)
LEVEL_PERCENTS = range(1, 100)  # p = k / 100
BINS = 10
NAN = math.nan


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def trapezoid(f: list[float], x: list[float]) -> float:
    return sum((x[j + 1] - x[j]) * (f[j] + f[j + 1]) / 2 for j in range(len(x) - 1))


def ranks(values: list[float]) -> list[float]:
    """1-based ranks, ties sharing their average rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for j in range(start, end + 1):
            out[order[j]] = (start + end) / 2 + 1
        start = end + 1
    return out


def pearson(a: list[float], b: list[float]) -> float:
    ma, mb = mean(a), mean(b)
    cov = sum((x - ma) * (y - mb) for x, y in zip(a, b, strict=True))
    return cov / math.sqrt(sum((x - ma) ** 2 for x in a) * sum((y - mb) ** 2 for y in b))


def calibration(observed: list[float]) -> dict:
    """Area, MCE, signed area, coverages and verdict of a calibration curve obs(p)."""
    if any(math.isnan(o) for o in observed):
        summary = dict.fromkeys(
            ("miscalibration_area", "mce", "overconfidence", "coverage_68", "coverage_95"), NAN
        )
        return {**summary, "verdict": "undefined"}
    p = [0.0] + [k / 100 for k in LEVEL_PERCENTS] + [1.0]
    obs = [0.0, *observed, 1.0]
    signed = trapezoid([pj - oj for pj, oj in zip(p, obs, strict=True)], p)
    if signed > 0.05:
        verdict = "overconfident"
    elif signed < -0.05:
        verdict = "underconfident"
    else:
        verdict = "calibrated"
    return {
        "miscalibration_area": trapezoid([abs(oj - pj) for pj, oj in zip(p, obs, strict=True)], p),
        "mce": max(abs(o - k / 100) for o, k in zip(observed, LEVEL_PERCENTS, strict=True)),
        "overconfidence": signed,
        "coverage_68": observed[67],
        "coverage_95": observed[94],
        "verdict": verdict,
    }


def coverage(abs_errors: list[float], half_widths: list[list[float]]) -> list[float]:
    """Share of molecules inside the interval, per level (rows of half_widths)."""
    if not abs_errors:
        return [NAN] * len(half_widths)
    return [
        mean([float(e <= w) for e, w in zip(abs_errors, row, strict=True)]) for row in half_widths
    ]


def gaussian_scores(y: list[float], mu: list[float], raw_sigma: list[float]) -> dict:
    """Every metric of one set scored with the Gaussian N(μ, σ²)."""
    n = len(y)
    sigma = [max(s, FLOOR) for s in raw_sigma]
    err = [a - b for a, b in zip(y, mu, strict=True)]
    abs_err = [abs(e) for e in err]
    nll = (
        mean(
            [
                0.5 * math.log(2 * math.pi * s**2) + e**2 / (2 * s**2)
                for e, s in zip(err, sigma, strict=True)
            ]
        )
        if n
        else NAN
    )
    varied = n >= 2 and len(set(abs_err)) > 1 and len(set(sigma)) > 1
    spearman = pearson(ranks(abs_err), ranks(sigma)) if varied else NAN
    z = [NormalDist().inv_cdf((1 + k / 100) / 2) for k in LEVEL_PERCENTS]
    cal = calibration(coverage(abs_err, [[zk * s for s in sigma] for zk in z]))
    # ENCE: σ-sorted molecules in K = min(10, n) bins of equal count, the larger bins first
    order = sorted(range(n), key=lambda i: sigma[i])
    k = max(min(BINS, n), 1)
    sizes = [n // k + (1 if b < n % k else 0) for b in range(k)]
    bins, start = [], 0
    for size in sizes:
        if size:
            bins.append(order[start : start + size])
        start += size
    rmv = [math.sqrt(mean([sigma[i] ** 2 for i in b])) for b in bins]
    rmse = [math.sqrt(mean([err[i] ** 2 for i in b])) for b in bins]
    ence = mean([abs(v - r) / v for v, r in zip(rmv, rmse, strict=True)]) if bins else NAN
    # confidence and oracle curves: RMSE of the ⌈q n / 100⌉ first molecules by σ / by |e|
    if n:
        by_sigma = sorted(range(n), key=lambda i: sigma[i])
        by_error = sorted(range(n), key=lambda i: err[i] ** 2)
        keep = [-(-q * n // 100) for q in PERCENTS]
        conf = [math.sqrt(sum(err[i] ** 2 for i in by_sigma[:m]) / m) for m in keep]
        oracle = [math.sqrt(sum(err[i] ** 2 for i in by_error[:m]) / m) for m in keep]
        auco = sum(c - o for c, o in zip(conf, oracle, strict=True))
        drop = conf[-1] / conf[0] if conf[0] > 0 else NAN
        decrease = mean([float(conf[j - 1] <= conf[j]) for j in range(1, 100)])
    else:
        auco = drop = decrease = NAN
    s_mean = mean(raw_sigma) if n else NAN
    cv = (
        math.sqrt(sum((s - s_mean) ** 2 for s in raw_sigma) / (n - 1)) / s_mean
        if n >= 2 and s_mean > 0
        else NAN
    )
    verdict = cal.pop("verdict")
    return {
        "n": n,
        "nll": nll,
        "spearman": spearman,
        **cal,
        "ence": ence,
        "auco": auco,
        "error_drop": drop,
        "decrease_ratio": decrease,
        "cv": cv,
        "verdict": verdict,
    }


def reference_sections(sets: dict[str, SetPredictions], method: str) -> dict:
    """What metrics.json's uq and uq_recalibrated sections must hold."""
    uq: dict = {"method": method}
    tests = {name: sets[name] for name in ("id", "ood") if name in sets}
    for name, s in tests.items():
        y, mu = list(s.y_true), list(s.y_pred)
        kinds = {"total": s.y_std, "epistemic": s.y_std_epistemic, "aleatoric": s.y_std_aleatoric}
        uq[name] = {k: gaussian_scores(y, mu, list(v)) for k, v in kinds.items() if v is not None}
    val = sets["val"]
    n_val = len(val.y_true)
    z = [(a - b) / max(s, FLOOR) for a, b, s in zip(val.y_true, val.y_pred, val.y_std, strict=True)]
    factor = math.sqrt(mean([zi**2 for zi in z]))
    scores = sorted(abs(zi) for zi in z)
    # k = ⌈(n + 1) p⌉ with p = q / 100, in integers; +inf past the n-th score
    quantiles = []
    for q in LEVEL_PERCENTS:
        rank = -(-(n_val + 1) * q // 100)
        quantiles.append(scores[rank - 1] if rank <= n_val else math.inf)
    zscaling: dict = {"factor": factor, "n_calibration": n_val}
    conformal: dict = {
        "n_calibration": n_val,
        "quantile_68": quantiles[67],
        "quantile_95": quantiles[94],
        "note": CONFORMAL_NOTE,
    }
    for name, s in tests.items():
        y, mu, sigma = list(s.y_true), list(s.y_pred), list(s.y_std)
        zscaling[name] = gaussian_scores(y, mu, [factor * si for si in sigma])
        abs_err = [abs(a - b) for a, b in zip(y, mu, strict=True)]
        widths = [[q * max(si, FLOOR) for si in sigma] for q in quantiles]
        conformal[name] = calibration(coverage(abs_err, widths))
    return {"uq": uq, "uq_recalibrated": {"zscaling": zscaling, "conformal": conformal}}


def assert_same(written: object, expected: object, where: str = "") -> None:
    """Equal keys in equal order, strings equal, numbers equal to 1e-12 (NaN as null)."""
    if isinstance(expected, dict):
        assert list(written) == list(expected), where
        for key in expected:
            assert_same(written[key], expected[key], f"{where}/{key}")
    elif isinstance(expected, str):
        assert written == expected, where
    elif math.isnan(expected) or math.isinf(expected):
        assert written is None, where  # JSON has neither
    else:
        assert written == pytest.approx(expected, rel=1e-12, abs=1e-12), where


def predictions(name: str, n: int, rng: np.random.Generator, **options) -> SetPredictions:
    y = rng.normal(size=n)
    pred = y + rng.standard_t(3, size=n) * 0.6
    epistemic = rng.uniform(0.0, 1.2, size=n)
    aleatoric = np.round(rng.uniform(0.2, 0.8, size=n), 1)  # ties in σ
    if n > 3:
        epistemic[:2] = 0.0  # a σ of zero, raised to the floor
        pred[2] = y[2]  # an exact prediction
    if options.get("constant"):
        epistemic = np.zeros(n)
        aleatoric = np.full(n, 0.5)
    if options.get("exact"):
        pred = y.copy()
    return SetPredictions(
        name,
        np.arange(n),
        np.array(["C" * (i + 1) for i in range(n)]),
        y,
        pred,
        np.sqrt(epistemic**2 + aleatoric**2),
        epistemic,
        aleatoric,
    )


CASES = {
    "typical": {"id": (37, {}), "ood": (29, {}), "val": (23, {})},
    "degenerate": {"id": (1, {}), "ood": (3, {"constant": True, "exact": True}), "val": (2, {})},
}


@pytest.mark.parametrize("case", CASES)
def test_written_uncertainty_sections_match_the_reference(case: str, tmp_path: Path) -> None:
    rng = np.random.default_rng(12)
    sets = {name: predictions(name, n, rng, **opts) for name, (n, opts) in CASES[case].items()}
    record = RunRecord("t", "ood", "m", 0, uq={"method": "mve", "member": None})
    write_results(tmp_path, sets, record, 0.0, "y", "")
    written = json.loads((tmp_path / "metrics.json").read_text())
    expected = reference_sections(sets, "mve")
    for section in ("uq", "uq_recalibrated"):
        assert_same(written[section], expected[section], section)
    frame = pd.read_csv(tmp_path / "predictions.csv")
    for name, s in sets.items():
        rows = frame[frame["set"] == name]
        for column in ("y_pred", "y_std", "y_std_epistemic", "y_std_aleatoric"):
            np.testing.assert_array_equal(rows[column].to_numpy(), getattr(s, column))


@pytest.mark.parametrize("n", [0, 1, 2, 57])
def test_every_evaluator_gives_exactly_uncertainty_metrics(n: int) -> None:
    """The known answers of test_uq_metrics.py (on `uncertainty_metrics`) hold for the
    evaluators that write metrics.json: the two agree bit for bit."""
    rng = np.random.default_rng(n)
    y, mu = rng.normal(size=n), rng.normal(size=n)
    sigma = np.round(rng.uniform(0.0, 2.0, size=n), 1)
    expected = uncertainty_metrics(y, mu, sigma)
    expected["verdict"] = calibration_verdict(expected["overconfidence"])
    written = evaluate(ScoredSet(y, mu, sigma), list(EVALUATORS))
    assert list(written) == list(expected)
    assert json.dumps(written) == json.dumps(expected)  # NaN == NaN, and no rounding
