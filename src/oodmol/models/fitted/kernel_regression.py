"""BenchML's simple regressors behind the same contract as the neural models: ridge
regression, kernel ridge regression (KRR) and Gaussian-process regression (GP) on any
vector representation, with their hyperparameters chosen by a nested search.

BenchML (Poelking et al. 2022) benchmarks representations rather than networks: each is
paired with linear and kernel ridge regression or a GP whose regularisation (and kernel
settings) are chosen by cross-validation inside the training data alone. Here:

- **The search** (`search`): k-fold cross-validation inside the run's training set, over
  a grid of length scales (relative to the median distance between training molecules;
  rbf and laplacian kernels) × regularisations α (BenchML's `logspace(-9, 7, 17)`),
  scored by the RMSE of all held-out folds together. One eigendecomposition per fold and
  length scale gives every α at once. Above `search_molecules` training molecules a
  search in the dual (an n × n kernel per fold) runs on a seeded subset of that many (α
  estimates a noise-to-signal ratio, which does not shrink with the training set as a
  regularisation per molecule would); a linear kernel solved in feature space (fewer
  features than molecules) searches on every training molecule. The final model is
  fitted on every training molecule.
- **The fit**: exact (a Cholesky factorisation of K + αI) up to `exact_molecules`
  training molecules, else a Nyström approximation on `landmarks` training molecules
  drawn at random (φ(x) = K_mm^{-1/2} k_m(x), solved in that feature space). The linear
  kernels are solved in feature space whenever the features are fewer than the
  molecules: the same predictor, cheaper.
- **KRR** predicts k(x, X)(K + αI)⁻¹y on the standardised targets (BenchML's
  `KernelRidge`, scikit-learn's with a precomputed kernel). **Ridge** is KRR with the
  plain dot-product kernel on the standardised features. **The GP** is the same mean
  with a predictive variance: prior covariance s²k, noise variance s²α, s² the
  maximum-likelihood signal variance yᵀ(K + αI)⁻¹y / n; its epistemic part
  s²(k(x, x) − k(x, X)(K + αI)⁻¹k(X, x)) and its aleatoric part s²α reach the
  uncertainty metrics and discovery campaigns like any other model's σ.

The model is fitted once, at the start of fitting, like the random forest
(`oodmol.models.fitted.forest`); a checkpoint holds plain tensors and numbers (the training
features and the dual coefficients, or the feature-space weights), so it loads with
`weights_only=True`. The search's table and choice are recorded in metrics.json (`fit`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from scipy.linalg import cho_factor, cho_solve, eigh, solve_triangular

from oodmol.data.batches import VectorBatch
from oodmol.errors import InputError
from oodmol.models.base import Prediction
from oodmol.models.fitted import kernels
from oodmol.models.fitted.base import FittedOnceModule

log = logging.getLogger(__name__)

CHECKPOINT_KEY = "kernel_regression"
FORMAT = 1
ALPHAS = tuple(float(a) for a in np.logspace(-9, 7, 17))  # BenchML's regularisation_range
SOLVERS = ("dual", "primal", "nystrom")
ARRAYS = ("x", "landmarks", "projection", "precision", "noise")  # beside `coef`, where held
_ROWS_PER_BLOCK = 8192  # rows of the Nyström feature map at a time: bounds its memory


@dataclass
class SearchResult:
    """The grid, the cross-validated RMSE of every point (standardised units), the chosen
    point, and what the search ran on."""

    length_scales: list[float | None]  # absolute; None for kernels without one
    alphas: list[float]
    rmse: np.ndarray  # (len(length_scales), len(alphas))
    length_scale: float | None
    alpha: float
    n_molecules: int
    folds: int
    distance_scale: float
    seconds: float = 0.0

    def facts(self) -> dict:
        return {
            "kernel_grid": self.length_scales,
            "alphas": self.alphas,
            "cv_rmse": [[_finite(v) for v in row] for row in self.rmse],
            "length_scale": self.length_scale,
            "alpha": self.alpha,
            "cv_rmse_best": _finite(float(np.nanmin(self.rmse))),
            "n_molecules": self.n_molecules,
            "folds": self.folds,
            "distance_scale": self.distance_scale,
            "seconds": round(self.seconds, 2),
        }


def search(
    kernel: str,
    x: np.ndarray,
    y: np.ndarray,
    relative_length_scales: Sequence[float] | None,
    alphas: Sequence[float],
    folds: int,
    seed: int,
    weights: np.ndarray | None = None,
) -> SearchResult:
    """k-fold cross-validation of KRR with `kernel` on (x, y) over length scales (relative
    to the median distance of x's molecules) × `alphas`; the point of least pooled
    held-out RMSE (ties: the first in grid order). With `weights`, the fits are weighted
    least squares and the held-out RMSE is weighted the same way."""
    started = time.perf_counter()
    n = len(x)
    if n < folds:
        raise InputError(
            f"the nested search's {folds}-fold cross-validation needs at least {folds} "
            f"training molecules, the run has {n}: lower folds or train on more molecules"
        )
    order = np.random.default_rng(seed).permutation(n)
    fold_of = np.empty(n, dtype=np.int64)
    fold_of[order] = np.arange(n) % folds
    explicit = kernels.primal(kernel, x.shape[1], n * (folds - 1) // folds)
    if explicit:
        phi = kernels.features(kernel, x)
        scale, values = 1.0, None
    else:
        values = kernels.base(kernel, x, x)
        scale = kernels.distance_scale(kernel, values)
    if kernel in kernels.SCALED:
        grid = [float(r) * scale for r in (relative_length_scales or [1.0])]
    else:
        grid = [None]
    alphas = np.asarray(alphas, dtype=np.float64)
    sse = np.zeros((len(grid), len(alphas)))
    root = None if weights is None else np.sqrt(weights)
    for g, length_scale in enumerate(grid):
        k_full = None if explicit else kernels.from_base(kernel, values.copy(), length_scale)
        for f in range(folds):
            train, test = np.flatnonzero(fold_of != f), np.flatnonzero(fold_of == f)
            # weighted least squares is plain least squares on rows scaled by √w: in
            # the dual, K̃ = D K D and coefficients D c̃ (D = diag √w)
            targets = y[train] if root is None else root[train] * y[train]
            if explicit:
                rows = phi[train] if root is None else phi[train] * root[train, None]
                s, v = eigh(rows.T @ rows, check_finite=False)
                b = v.T @ (rows.T @ targets)
                del rows
                projected = phi[test] @ v
            else:
                block = k_full[np.ix_(train, train)]
                if root is not None:
                    block *= root[train, None] * root[None, train]
                s, v = eigh(block, check_finite=False)
                b = v.T @ targets
                if root is not None:
                    v *= root[train, None]
                projected = k_full[np.ix_(test, train)] @ v
            s = np.maximum(s, 0.0)
            predictions = projected @ (b[:, None] / (s[:, None] + alphas[None, :]))
            squares = (predictions - y[test][:, None]) ** 2
            sse[g] += (squares if weights is None else squares * weights[test, None]).sum(axis=0)
    rmse = np.sqrt(sse / (n if weights is None else weights.sum()))
    rmse[~np.isfinite(rmse)] = np.inf
    g, a = np.unravel_index(int(np.argmin(rmse)), rmse.shape)
    return SearchResult(
        length_scales=grid,
        alphas=alphas.tolist(),
        rmse=rmse,
        length_scale=grid[g],
        alpha=float(alphas[a]),
        n_molecules=n,
        folds=folds,
        distance_scale=scale,
        seconds=time.perf_counter() - started,
    )


@dataclass
class FittedKernelModel:
    """A fitted model as plain arrays: `dual` (training features `x`, coefficients
    `coef`), `primal` (feature-space weights `coef` of a linear kernel) or `nystrom`
    (`landmarks`, their `projection` K_mm^{-1/2}, weights `coef`). `signal_variance` s²
    (standardised units); for the variance of the feature-space solvers, the Cholesky
    factor `precision` of ΦᵀWΦ + αI (lower). A dual fit with training weights w holds
    its diagonal `noise` α/w (K + αW⁻¹; None: α on every molecule)."""

    kernel: str
    solver: str
    length_scale: float | None
    alpha: float
    signal_variance: float
    coef: np.ndarray
    x: np.ndarray | None = None
    landmarks: np.ndarray | None = None
    projection: np.ndarray | None = None
    precision: np.ndarray | None = None
    noise: np.ndarray | None = None
    _dual_cholesky: np.ndarray | None = field(default=None, repr=False)

    @property
    def n_values(self) -> int:
        arrays = [self.coef, *(getattr(self, name) for name in ARRAYS)]
        return int(sum(a.size for a in arrays if a is not None))

    def phi(self, x: np.ndarray) -> np.ndarray:
        """The feature-space map of the primal and Nyström solvers."""
        if self.solver == "primal":
            return kernels.features(self.kernel, x)
        k = kernels.kernel(self.kernel, x, self.landmarks, self.length_scale)
        return k @ self.projection

    def mean(self, x: np.ndarray) -> np.ndarray:
        if self.solver == "dual":
            return kernels.kernel(self.kernel, x, self.x, self.length_scale) @ self.coef
        return self.phi(x) @ self.coef

    def variance(self, x: np.ndarray) -> np.ndarray:
        """s²(k(x, x) − k(x, X)(K + αI)⁻¹k(X, x)), standardised units (≥ 0)."""
        if self.solver == "dual":
            k = kernels.kernel(self.kernel, x, self.x, self.length_scale)
            v = solve_triangular(self.dual_cholesky(), k.T, lower=True, check_finite=False)
            explained = np.einsum("ij,ij->j", v, v)
            prior = kernels.diagonal(self.kernel, x, self.length_scale)
        else:
            phi = self.phi(x)
            v = solve_triangular(self.precision, phi.T, lower=True, check_finite=False)
            # k** − k*ᵀ(ΦΦᵀ + αI)⁻¹k* = α φ*ᵀ(ΦᵀΦ + αI)⁻¹φ* (push-through identity); the
            # Nyström prior k** exceeds φ*·φ* by what the landmarks do not span
            explained = 0.0
            prior = self.alpha * np.einsum("ij,ij->j", v, v)
            if self.solver == "nystrom":
                prior += kernels.diagonal(self.kernel, x, self.length_scale)
                prior -= np.einsum("ij,ij->i", phi, phi)
        return self.signal_variance * np.maximum(prior - explained, 0.0)

    def dual_cholesky(self) -> np.ndarray:
        """The lower Cholesky factor of K + αI (K + αW⁻¹ with weights), computed once
        (not stored: the training features give it again)."""
        if self._dual_cholesky is None:
            k = kernels.kernel(self.kernel, self.x, self.x, self.length_scale)
            k[np.diag_indices_from(k)] += self.alpha if self.noise is None else self.noise
            self._dual_cholesky = np.linalg.cholesky(k)
        return self._dual_cholesky

    def to_checkpoint(self) -> dict:
        entry: dict[str, Any] = {
            "format": FORMAT,
            "kernel": self.kernel,
            "solver": self.solver,
            "length_scale": self.length_scale,
            "alpha": self.alpha,
            "signal_variance": self.signal_variance,
            "coef": torch.from_numpy(np.ascontiguousarray(self.coef, dtype=np.float64)),
        }
        for name in ARRAYS:
            value = getattr(self, name)
            if value is not None:
                dtype = np.float32 if name in ("x", "landmarks") else np.float64
                entry[name] = torch.from_numpy(np.ascontiguousarray(value, dtype=dtype))
        return entry

    @classmethod
    def from_checkpoint(cls, entry: Mapping, where: str) -> FittedKernelModel:
        if not isinstance(entry, Mapping) or entry.get("format") != FORMAT:
            raise ValueError(f"{where}: the kernel model's entry is not in format {FORMAT}")
        needed = {"dual": ("x",), "primal": (), "nystrom": ("landmarks", "projection")}
        solver, kernel = entry.get("solver"), entry.get("kernel")
        if solver not in SOLVERS or kernel not in kernels.KERNELS:
            raise ValueError(f"{where}: unknown solver {solver!r} or kernel {kernel!r}")
        required = ("coef", *needed[solver])
        for name in ("coef", *ARRAYS):
            held = name in required or entry.get(name) is not None
            if held and not isinstance(entry.get(name), torch.Tensor):
                raise ValueError(f"{where}: the kernel model's {name!r} is not a tensor")

        def array(name: str) -> np.ndarray | None:
            value = entry.get(name)
            return None if value is None else value.numpy()

        return cls(
            kernel=entry["kernel"],
            solver=solver,
            length_scale=entry["length_scale"],
            alpha=float(entry["alpha"]),
            signal_variance=float(entry["signal_variance"]),
            coef=array("coef"),
            x=array("x"),
            landmarks=array("landmarks"),
            projection=array("projection"),
            precision=array("precision"),
            noise=array("noise"),
        )


def fit(
    kernel: str,
    x: np.ndarray,
    y: np.ndarray,
    length_scale: float | None,
    alpha: float,
    exact_molecules: int,
    landmarks: int,
    seed: int,
    variance: bool,
    weights: np.ndarray | None = None,
) -> FittedKernelModel:
    """The model with the chosen hyperparameters on every training molecule: exact in
    the dual up to `exact_molecules` molecules, in feature space for a linear kernel with
    fewer features than molecules, Nyström on `landmarks` molecules beyond. `variance`:
    keep what the GP's variance needs. `weights`: weighted least squares (in feature
    space, rows and targets scaled by √w; in the dual, K + αW⁻¹)."""
    n, d = x.shape
    root = None if weights is None else np.sqrt(weights)
    scaled_y = y if root is None else root * y
    if kernels.primal(kernel, d, n):
        phi = kernels.features(kernel, x)
        phi = phi if root is None else phi * root[:, None]
        return _feature_space(kernel, "primal", phi, scaled_y, alpha, variance)
    if n <= exact_molecules:
        k = kernels.kernel(kernel, x, x, length_scale)
        noise = None if weights is None else alpha / weights
        k[np.diag_indices_from(k)] += alpha if noise is None else noise
        factor = cho_factor(k, lower=True, overwrite_a=True, check_finite=False)
        coef = cho_solve(factor, y, check_finite=False)
        chosen = FittedKernelModel(
            kernel, "dual", length_scale, alpha, float(y @ coef) / n, coef, x=x.copy(), noise=noise
        )
        chosen._dual_cholesky = np.tril(factor[0]) if variance else None
        return chosen
    chosen_rows = np.sort(np.random.default_rng(seed).choice(n, size=landmarks, replace=False))
    centres = x[chosen_rows]
    s, u = eigh(kernels.kernel(kernel, centres, centres, length_scale), check_finite=False)
    keep = s > s.max() * 1e-10
    projection = u[:, keep] / np.sqrt(s[keep])

    def phi_blocks():
        """Φ by blocks of rows: Φ (n × m) itself is never held."""
        for start in range(0, n, _ROWS_PER_BLOCK):
            block = x[start : start + _ROWS_PER_BLOCK]
            rows = kernels.kernel(kernel, block, centres, length_scale) @ projection
            yield rows if root is None else rows * root[start : start + len(block), None]

    model = _feature_space(kernel, "nystrom", phi_blocks(), scaled_y, alpha, variance)
    model.length_scale, model.landmarks, model.projection = length_scale, centres, projection
    return model


def _feature_space(
    kernel: str,
    solver: str,
    phi: np.ndarray | Iterable[np.ndarray],
    y: np.ndarray,
    alpha: float,
    variance: bool,
) -> FittedKernelModel:
    """Ridge in feature space: w = (ΦᵀΦ + αI)⁻¹Φᵀy; s² by the push-through identity,
    yᵀ(ΦΦᵀ + αI)⁻¹y = (yᵀy − yᵀΦ w) / α. Φ may come as consecutive blocks of rows."""
    blocks = [phi] if isinstance(phi, np.ndarray) else phi
    gram, projected, start = None, None, 0
    for block in blocks:
        part = y[start : start + len(block)]
        start += len(block)
        gram = block.T @ block if gram is None else gram + block.T @ block
        projected = block.T @ part if projected is None else projected + block.T @ part
    gram[np.diag_indices_from(gram)] += alpha
    lower = np.linalg.cholesky(gram)
    coef = cho_solve((lower, True), projected, check_finite=False)
    signal = float(y @ y - projected @ coef) / alpha / len(y)
    return FittedKernelModel(
        kernel,
        solver,
        None,
        alpha,
        signal,
        coef,
        precision=lower if variance else None,
    )


class KernelRegressionModule(FittedOnceModule):
    """Ridge, kernel ridge or Gaussian-process regression on a vector representation,
    its hyperparameters chosen by the nested search, inside Lightning (fitted once on the
    training set, like the random forest).

    `kernel`: one of `oodmol.models.fitted.kernels.KERNELS`. `length_scales`: the search's grid
    of length scales, as multiples of the median distance between training molecules
    (rbf, laplacian; ignored by the others). `alphas`: its grid of regularisations.
    `folds`, `cv_seed`: the cross-validation (the folds, the search's subset and the
    landmarks are drawn with `cv_seed`, the run's seed in the model configs: the fit is
    deterministic given it, and seeds measure how far the draw moves the choice).
    `search_molecules`: at most this many training molecules in the search.
    `exact_molecules`: the exact fit's limit, above which `landmarks` training molecules
    carry a Nyström approximation.
    `variance`: a GP (predictive σ) rather than KRR.
    """

    def __init__(
        self,
        kernel: str = "rbf",
        length_scales: Sequence[float] | None = (0.5, 1.0, 2.0, 4.0),
        alphas: Sequence[float] = ALPHAS,
        folds: int = 5,
        cv_seed: int = 0,
        search_molecules: int | None = 2000,
        exact_molecules: int = 15000,
        landmarks: int = 4000,
        variance: bool = False,
    ) -> None:
        super().__init__()
        self.kernel = kernels.check_kernel(kernel)
        scales = None if length_scales is None else _grid("length_scales", length_scales)
        self.length_scales, self.alphas = scales, _grid("alphas", alphas)
        if isinstance(folds, bool) or not isinstance(folds, int) or folds < 2:
            raise InputError(
                f"folds={folds}: the nested search's k-fold cross-validation needs a whole "
                "number of folds ≥ 2 (5 by default)"
            )
        self.folds, self.cv_seed = folds, int(cv_seed)
        self.search_molecules = search_molecules
        self.exact_molecules, self.landmarks = int(exact_molecules), int(landmarks)
        self.variance = bool(variance)
        self.model: FittedKernelModel | None = None
        self.search_facts: dict = {}

    def is_fitted(self) -> bool:
        return self.model is not None

    def fit_training_set(
        self, x: np.ndarray, y: np.ndarray, weights: np.ndarray | None = None
    ) -> FittedKernelModel:
        """Search, then fit on all of (x, y) (targets in the property's units; they are
        standardised with the module's training statistics), by weighted least squares
        where `weights` are given."""
        started = time.perf_counter()
        x = np.asarray(x, dtype=np.float64)
        y = (np.asarray(y, dtype=np.float64) - float(self.y_mean)) / float(self.y_std)
        if self.kernel == "tanimoto" and (x < 0).any():
            raise InputError(
                "the Tanimoto (MinMax) kernel takes non-negative features, and this "
                "representation has negative ones: use it with fingerprints or counts "
                "(model/representation=ecfp4, ecfp4_counts, ...), or another kernel"
            )
        rows = np.arange(len(x))
        in_feature_space = kernels.primal(
            self.kernel, x.shape[1], len(x) * (self.folds - 1) // self.folds
        )
        if (
            self.search_molecules is not None
            and len(x) > self.search_molecules
            and not in_feature_space
        ):
            rng = np.random.default_rng(self.cv_seed)
            rows = np.sort(rng.choice(len(x), size=self.search_molecules, replace=False))
        log.info(
            "%s kernel: %d-fold search on %d of %d training molecules",
            self.kernel,
            self.folds,
            len(rows),
            len(x),
        )
        result = search(
            self.kernel,
            x[rows],
            y[rows],
            self.length_scales,
            self.alphas,
            self.folds,
            self.cv_seed,
            None if weights is None else weights[rows],
        )
        self.model = fit(
            self.kernel,
            x,
            y,
            result.length_scale,
            result.alpha,
            self.exact_molecules,
            min(self.landmarks, len(x)),
            self.cv_seed,
            self.variance,
            weights,
        )
        self.search_facts = {
            "method": "gp" if self.variance else "krr",
            "kernel": self.kernel,
            "solver": self.model.solver,
            "n_train": len(x),
            "weighted": weights is not None,
            "landmarks": None if self.model.landmarks is None else len(self.model.landmarks),
            "signal_variance": self.model.signal_variance,
            "search": result.facts(),
            "seconds": round(time.perf_counter() - started, 2),
        }
        log.info(
            "chosen: length scale %s, alpha %g (cv rmse %.4g, standardised); %s solver",
            result.length_scale,
            result.alpha,
            float(np.min(result.rmse)),
            self.model.solver,
        )
        return self.model

    def fit_facts(self) -> dict:
        return {"fit": self.search_facts} if self.search_facts else {}

    def predict_batch(self, batch: VectorBatch) -> Prediction:
        if self.model is None:
            raise RuntimeError("the kernel model is used before it was fitted")
        x = batch.x.detach().cpu().numpy().astype(np.float64)
        scale = float(self.y_std)
        mean = self.model.mean(x) * scale + float(self.y_mean)
        prediction = Prediction(torch.as_tensor(mean, dtype=torch.float32, device=self.device))
        if self.variance:
            epistemic = self.model.variance(x) * scale**2
            aleatoric = np.full(len(x), self.model.signal_variance * self.model.alpha * scale**2)
            prediction.var_epistemic = torch.as_tensor(epistemic, dtype=torch.float32).to(
                self.device
            )
            prediction.var_aleatoric = torch.as_tensor(aleatoric, dtype=torch.float32).to(
                self.device
            )
        return prediction

    def n_params(self) -> int:
        return self.model.n_values if self.model is not None else 0

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        if self.model is None:
            raise RuntimeError("a checkpoint of the kernel model is saved before it was fitted")
        checkpoint[CHECKPOINT_KEY] = {**self.model.to_checkpoint(), "facts": self.search_facts}

    def load_fit(self, checkpoint: dict, where: str) -> None:
        if CHECKPOINT_KEY not in checkpoint:
            raise ValueError(f"{where} holds no kernel model ({CHECKPOINT_KEY!r})")
        entry = checkpoint[CHECKPOINT_KEY]
        self.model = FittedKernelModel.from_checkpoint(entry, where)
        self.search_facts = dict(entry.get("facts") or {})


# each search grid of the settings: what it holds, and an example
_GRIDS = {
    "alphas": ("the regularisations to try", "[1e-6,1e-3,1]"),
    "length_scales": (
        "the length scales to try (multiples of the median distance between molecules)",
        "[0.5,1,2], or null for a kernel without one",
    ),
}


def _grid(name: str, values: Sequence[float]) -> list[float]:
    """A search grid of the settings: one or more finite numbers > 0."""
    listed = isinstance(values, Sequence) and not isinstance(values, str)
    shown = f"{name}={list(values) if listed else values!r}"
    try:
        grid = [float(v) for v in values]
    except (TypeError, ValueError):
        grid = []
    if not grid or not all(math.isfinite(v) and v > 0 for v in grid):
        meaning, example = _GRIDS[name]
        raise InputError(f"{shown}: {meaning} must be one or more numbers > 0, e.g. {example}")
    return grid


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None
