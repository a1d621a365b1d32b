"""BenchML's regressors held to known answers: each kernel to its formula, the nested
search to a brute-force cross-validation and to a known optimum, KRR to scikit-learn's
`KernelRidge`, the GP to its closed-form posterior (and to scikit-learn's GP), the
feature-space and Nyström solvers to the exact one, and a checkpoint to itself."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel
from sklearn.kernel_ridge import KernelRidge
from sklearn.metrics.pairwise import laplacian_kernel, rbf_kernel

from oodmol.data.batches import VectorBatch
from oodmol.errors import InputError
from oodmol.models.fitted import kernels
from oodmol.models.fitted.kernel_regression import (
    CHECKPOINT_KEY,
    FittedKernelModel,
    KernelRegressionModule,
    fit,
    search,
)


@pytest.fixture
def data() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A smooth function of 4 features with a little noise: training and test rows."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(160, 4))
    y = np.sin(x[:, 0]) + 0.5 * x[:, 1] * x[:, 2] + 0.05 * rng.normal(size=len(x))
    return x[:120], y[:120], x[120:]


def direct(name: str, a: np.ndarray, b: np.ndarray, length_scale: float = 1.0) -> np.ndarray:
    """Each kernel entry by its formula, one pair at a time."""
    out = np.empty((len(a), len(b)))
    for i, u in enumerate(a):
        for j, v in enumerate(b):
            if name == "rbf":
                out[i, j] = np.exp(-np.sum((u - v) ** 2) / (2 * length_scale**2))
            elif name == "laplacian":
                out[i, j] = np.exp(-np.sum(np.abs(u - v)) / length_scale)
            elif name == "linear":
                out[i, j] = u @ v / (np.linalg.norm(u) * np.linalg.norm(v))
            elif name == "dot":
                out[i, j] = u @ v
            else:
                high = np.maximum(u, v).sum()
                out[i, j] = np.minimum(u, v).sum() / high if high > 0 else 1.0
    return out


@pytest.mark.parametrize("name", ["rbf", "laplacian", "linear", "dot"])
def test_each_kernel_is_its_formula(name) -> None:
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(7, 5)), rng.normal(size=(6, 5))
    np.testing.assert_allclose(kernels.kernel(name, a, b, 1.7), direct(name, a, b, 1.7), 1e-12)
    diagonal = kernels.diagonal(name, a, 1.7)
    np.testing.assert_allclose(diagonal, np.diag(direct(name, a, a, 1.7)), rtol=1e-12)


def test_rbf_and_laplacian_are_scikit_learns() -> None:
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(9, 3)), rng.normal(size=(4, 3))
    np.testing.assert_allclose(kernels.kernel("rbf", a, b, 2.0), rbf_kernel(a, b, gamma=1 / 8))
    laplace = laplacian_kernel(a, b, gamma=1 / 2.0)
    np.testing.assert_allclose(kernels.kernel("laplacian", a, b, 2.0), laplace)


@pytest.mark.parametrize("counts", [False, True])
def test_tanimoto_is_minmax_and_tanimoto_on_bits(counts) -> None:
    rng = np.random.default_rng(3)
    a = rng.integers(0, 4 if counts else 2, size=(6, 40)).astype(float)
    b = rng.integers(0, 4 if counts else 2, size=(5, 40)).astype(float)
    b[0] = 0.0  # an empty fingerprint
    np.testing.assert_allclose(kernels.kernel("tanimoto", a, b), direct("tanimoto", a, b))
    if not counts:  # |a ∩ b| / |a ∪ b|
        both = (a[:, None, :] * b[None, :, :]).sum(-1)
        union = a.sum(1)[:, None] + b.sum(1)[None, :] - both
        expected = np.divide(both, union, out=np.ones_like(both), where=union > 0)
        np.testing.assert_allclose(kernels.kernel("tanimoto", a, b), expected)
    with pytest.raises(ValueError, match="non-negative"):
        kernels.kernel("tanimoto", a - 1.0, b)


def test_the_search_is_a_brute_force_cross_validation(data) -> None:
    """Every point of the search's table: KernelRidge fitted on each fold, the held-out
    squared errors pooled."""
    x, y, _ = data
    alphas = [1e-3, 1e-1, 10.0]
    result = search("rbf", x, y, [0.5, 2.0], alphas, folds=4, seed=7)
    order = np.random.default_rng(7).permutation(len(x))
    fold_of = np.empty(len(x), dtype=int)
    fold_of[order] = np.arange(len(x)) % 4
    scale = kernels.distance_scale("rbf", kernels.base("rbf", x, x))
    assert result.length_scales == pytest.approx([0.5 * scale, 2.0 * scale])
    for g, length_scale in enumerate(result.length_scales):
        k = kernels.kernel("rbf", x, x, length_scale)
        for a, alpha in enumerate(alphas):
            errors = []
            for f in range(4):
                train, test = fold_of != f, fold_of == f
                model = KernelRidge(alpha=alpha, kernel="precomputed")
                model.fit(k[np.ix_(train, train)], y[train])
                errors.append(model.predict(k[np.ix_(test, train)]) - y[test])
            rmse = np.sqrt(np.mean(np.concatenate(errors) ** 2))
            assert result.rmse[g, a] == pytest.approx(rmse, rel=1e-8)
    best = np.unravel_index(np.argmin(result.rmse), result.rmse.shape)
    assert (result.length_scale, result.alpha) == (result.length_scales[best[0]], alphas[best[1]])


def test_the_search_finds_the_bayes_optimal_ridge_penalty() -> None:
    """y = Xw + ε with w ~ N(0, τ²I), ε ~ N(0, σ²): the posterior mean, ridge with
    α = σ²/τ², predicts best; the search chooses the grid point nearest to it."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(3000, 30))
    tau, sigma = 0.5, 2.0  # α* = 16
    y = x @ (tau * rng.normal(size=30)) + sigma * rng.normal(size=len(x))
    alphas = [0.01, 0.1, 1.0, 16.0, 256.0, 4096.0]
    result = search("dot", x, y, None, alphas, folds=5, seed=0)
    assert result.alpha == 16.0
    assert result.length_scale is None and result.length_scales == [None]


def test_the_search_chooses_a_known_length_scale() -> None:
    """A noiseless function that varies on one length scale (a sine of period 2π along
    one axis): shorter scales overfit the gaps, longer ones smooth it away."""
    rng = np.random.default_rng(5)
    x = rng.uniform(-6, 6, size=(400, 1))
    y = np.sin(3 * x[:, 0])
    result = search("rbf", x, y, [0.02, 0.1, 0.5, 2.5], [1e-8, 1e-6, 1e-4], folds=5, seed=0)
    scale = kernels.distance_scale("rbf", kernels.base("rbf", x, x))
    assert result.length_scale == pytest.approx(0.1 * scale)


def test_krr_is_scikit_learns_kernel_ridge(data) -> None:
    x, y, test = data
    model = fit("laplacian", x, y, 3.0, 0.05, 10_000, 10, 0, variance=False)
    reference = KernelRidge(alpha=0.05, kernel="precomputed")
    reference.fit(kernels.kernel("laplacian", x, x, 3.0), y)
    expected = reference.predict(kernels.kernel("laplacian", test, x, 3.0))
    np.testing.assert_allclose(model.mean(test), expected, rtol=1e-9, atol=1e-12)
    assert model.solver == "dual"


def test_gp_is_the_closed_form_posterior(data) -> None:
    """Prior covariance s²k, noise s²α: mean k*ᵀ(K + αI)⁻¹y, variance of f
    s²(k** − k*ᵀ(K + αI)⁻¹k*), s² = yᵀ(K + αI)⁻¹y / n; and scikit-learn's GP with the
    same fixed kernel and noise gives the same mean and standard deviation."""
    x, y, test = data
    length_scale, alpha = 1.3, 0.01
    model = fit("rbf", x, y, length_scale, alpha, 10_000, 10, 0, variance=True)
    k = kernels.kernel("rbf", x, x, length_scale)
    inverse = np.linalg.inv(k + alpha * np.eye(len(x)))
    k_star = kernels.kernel("rbf", test, x, length_scale)
    signal = y @ inverse @ y / len(x)
    assert model.signal_variance == pytest.approx(signal, rel=1e-9)
    np.testing.assert_allclose(model.mean(test), k_star @ inverse @ y, rtol=1e-8, atol=1e-10)
    variance = signal * (1.0 - np.einsum("ij,jk,ik->i", k_star, inverse, k_star))
    np.testing.assert_allclose(model.variance(test), variance, rtol=1e-6, atol=1e-12)
    kernel = ConstantKernel(signal, "fixed") * RBF(length_scale, "fixed")
    gp = GaussianProcessRegressor(kernel, alpha=signal * alpha, optimizer=None).fit(x, y)
    mean, std = gp.predict(test, return_std=True)
    np.testing.assert_allclose(model.mean(test), mean, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(np.sqrt(model.variance(test)), std, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", ["linear", "dot"])
def test_feature_space_solver_is_the_dual_one(name, data) -> None:
    """A linear kernel with fewer features than molecules is solved in feature space:
    the same mean, variance and signal variance as the dual solution."""
    x, y, test = data
    primal = fit(name, x, y, None, 0.3, 10_000, 10, 0, variance=True)
    assert primal.solver == "primal"  # 4 features, 120 molecules
    dual_model = FittedKernelModel(name, "dual", None, 0.3, 0.0, np.zeros(1), x=x)
    k = kernels.kernel(name, x, x) + 0.3 * np.eye(len(x))
    dual_model.coef = np.linalg.solve(k, y)
    dual_model.signal_variance = y @ dual_model.coef / len(y)
    np.testing.assert_allclose(primal.mean(test), dual_model.mean(test), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(primal.variance(test), dual_model.variance(test), rtol=1e-6)
    assert primal.signal_variance == pytest.approx(dual_model.signal_variance, rel=1e-9)


def test_nystrom_on_every_training_molecule_is_exact(data) -> None:
    x, y, test = data
    exact = fit("rbf", x, y, 2.0, 0.01, 10_000, len(x), 0, variance=True)
    nystrom = fit("rbf", x, y, 2.0, 0.01, 50, len(x), 0, variance=True)
    assert (exact.solver, nystrom.solver) == ("dual", "nystrom")
    np.testing.assert_allclose(nystrom.mean(test), exact.mean(test), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(nystrom.variance(test), exact.variance(test), atol=1e-5)


def test_nystrom_on_a_subset_approximates_the_exact_kernel() -> None:
    """600 molecules, 150 landmarks, a smooth function: within a few percent of the
    exact kernel's predictions (relative to their spread)."""
    rng = np.random.default_rng(6)
    x = rng.normal(size=(700, 3))
    y = np.sin(x[:, 0]) + np.cos(x[:, 1]) * x[:, 2]
    train, test = slice(0, 600), slice(600, None)
    exact = fit("rbf", x[train], y[train], 2.5, 1e-3, 10_000, 150, 0, variance=True)
    approx = fit("rbf", x[train], y[train], 2.5, 1e-3, 100, 150, 0, variance=True)
    assert approx.solver == "nystrom" and len(approx.landmarks) == 150
    gap = np.abs(approx.mean(x[test]) - exact.mean(x[test]))
    assert gap.max() < 0.05 * np.std(exact.mean(x[test]))
    assert np.all(approx.variance(x[test]) >= 0)


def module_fitted(kernel: str, variance: bool, x: np.ndarray, y: np.ndarray):
    module = KernelRegressionModule(
        kernel=kernel,
        length_scales=[0.5, 1.0],
        alphas=[1e-3, 1e-1],
        folds=3,
        search_molecules=80,
        variance=variance,
    )
    module.fit_target_scaling(y)
    module.fit_training_set(x, y)
    return module


def test_the_module_standardises_targets_and_records_its_search(data) -> None:
    """Targets in the property's units: the model sees them standardised with the
    training mean and deviation, and predicts in the property's units; the search's
    subset, grid and choice are in its facts."""
    x, y, test = data
    y_units = 3.0 * y + 10.0
    module = module_fitted("rbf", True, x, y_units)
    facts = module.fit_facts()["fit"]
    assert facts["search"]["n_molecules"] == 80 and facts["n_train"] == 120
    assert facts["search"]["alpha"] in (1e-3, 1e-1)
    assert facts["method"] == "gp" and facts["solver"] == "dual"
    ridge = module_fitted("dot", False, x, y_units).fit_facts()["fit"]  # in feature space:
    assert ridge["search"]["n_molecules"] == 120 and ridge["solver"] == "primal"  # all
    model = module.model
    standardised = (y_units - y_units.mean()) / y_units.std(ddof=1)
    reference = KernelRidge(alpha=model.alpha, kernel="precomputed")
    reference.fit(kernels.kernel("rbf", x, x, model.length_scale), standardised)
    expected = reference.predict(kernels.kernel("rbf", test, x, model.length_scale))
    batch = VectorBatch(x=torch.as_tensor(test, dtype=torch.float32), y=None, index=None)
    prediction = module.predict_batch(batch)
    np.testing.assert_allclose(
        prediction.mean.numpy(),
        expected * y_units.std(ddof=1) + y_units.mean(),
        rtol=1e-4,
    )
    scale = y_units.std(ddof=1) ** 2
    noise = model.signal_variance * model.alpha * scale
    np.testing.assert_allclose(prediction.var_aleatoric.numpy(), noise, rtol=1e-5)
    assert (prediction.var_epistemic.numpy() >= 0).all()


def test_krr_gives_no_sigma_and_tanimoto_refuses_negative_features(data) -> None:
    x, y, test = data
    module = module_fitted("rbf", False, x, y)
    batch = VectorBatch(x=torch.as_tensor(test, dtype=torch.float32), y=None, index=None)
    prediction = module.predict_batch(batch)
    assert prediction.var_epistemic is None and prediction.var_aleatoric is None
    with pytest.raises(InputError, match="non-negative"):
        module_fitted("tanimoto", False, x, y)


@pytest.mark.parametrize("kernel, exact", [("rbf", 10_000), ("rbf", 50), ("linear", 10_000)])
def test_a_checkpoint_is_plain_tensors_and_predicts_the_same(kernel, exact, data) -> None:
    """The module's checkpoint entry loads with weights_only=True (no pickle) and the
    loaded model predicts (mean and σ) exactly as the fitted one."""
    x, y, test = data
    module = module_fitted(kernel, True, x, y)
    if exact < len(x):  # refit by Nyström
        module.model = fit(kernel, x, y, 1.0, 0.01, exact, 40, 0, variance=True)
    checkpoint: dict = {}
    module.on_save_checkpoint(checkpoint)
    buffer = io.BytesIO()
    torch.save(checkpoint, buffer)
    buffer.seek(0)
    loaded_entry = torch.load(buffer, weights_only=True)
    assert loaded_entry[CHECKPOINT_KEY]["facts"] == module.search_facts
    loaded = KernelRegressionModule(kernel=kernel, variance=True)
    loaded.y_mean.copy_(module.y_mean)
    loaded.y_std.copy_(module.y_std)
    loaded.on_load_checkpoint(loaded_entry)
    batch = VectorBatch(x=torch.as_tensor(test, dtype=torch.float32), y=None, index=None)
    before, after = module.predict_batch(batch), loaded.predict_batch(batch)
    torch.testing.assert_close(after.mean, before.mean)
    torch.testing.assert_close(after.var_epistemic, before.var_epistemic)
    assert loaded.n_params() == module.n_params() > 0


def test_a_damaged_checkpoint_entry_is_refused() -> None:
    module = KernelRegressionModule()
    with pytest.raises(ValueError, match="holds no kernel model"):
        module.on_load_checkpoint({})
    with pytest.raises(ValueError, match="format"):
        module.on_load_checkpoint({CHECKPOINT_KEY: {"format": 99}})
    with pytest.raises(ValueError, match="'x' is not a tensor"):
        entry = {"format": 1, "kernel": "rbf", "solver": "dual", "coef": torch.zeros(3)}
        module.on_load_checkpoint({CHECKPOINT_KEY: entry})
