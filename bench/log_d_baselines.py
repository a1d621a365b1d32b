"""Lipophilicity's Δ-learning baselines side by side: linear fits of one or several log D
estimates, alone and under one kernel ridge residual model, on BOOM's OOD split.

    python -m bench.log_d_baselines

`baseline=physics` fits y ≈ a + b · log_d on the training molecules, log_d being ALPB's
log P less the ionisation shift at pH 7.4 (oodmol.data.featurize.physics), so the shift
gets the noisy log P's slope. This bench asks whether a fit of several estimates, each
with a slope of its own, extrapolates further: ALPB's log P, the ionisation shift, and
RDKit's Crippen log P (`MolLogP`, an empirical atom-contribution estimate, one of the
descriptors). Each row is the run's own fit (`LinearBaseline`, as
`baseline=physics_descriptors` makes it) on the training molecules (no target of another
set reaches it), found both ways `baseline.fit` offers: least squares of the property on
the estimates, and calibration (each estimate regressed on the property, then solved for
it); its ID and OOD RMSE alone, then those of kernel
ridge (RBF, on the standardised descriptors and physics estimates, its width and
regularisation chosen on the validation molecules from a 3 × 3 grid) trained on what
the fit leaves and predicting it back. The kernel model is scikit-learn's, the same for
every row, not `model=krr_rbf`'s search: the rows compare baselines, not models. Molecules without
physics estimates are left out, as a run leaves them out. Needs the task's descriptors
and physics caches (built where missing, as a run builds them).
"""

from __future__ import annotations

import numpy as np
from sklearn.kernel_ridge import KernelRidge

from oodmol.config import compose_config
from oodmol.data.baseline import LinearBaseline
from oodmol.lines import LINES
from oodmol.training.build import build_datamodule

COLUMNS = (
    ("log_d",),
    ("log_p", "ionisation"),
    ("MolLogP",),
    ("MolLogP", "ionisation"),
    ("log_p", "MolLogP", "ionisation"),
)
SETS = ("train", "val", "id", "ood")


def features():
    """Per set: the descriptors and physics estimates joined (molecules with estimates
    only), and the targets; and the data module that read them."""
    cfg = compose_config(
        "train",
        [
            "task=lipophilicity",
            "model=krr_rbf",
            "model/representation=descriptors_physics",
            "progress=false",
        ],
    )
    dm = build_datamodule(cfg)
    dm.prepare_data()
    dm.setup("fit")
    x, y = {}, {}
    for name in SETS:
        ids = dm.set_ids[name]
        x[name] = dm.store.matrix(ids)
        y[name] = dm.data.y[dm.data.table.rows_of(ids)].astype(np.float64)
    return x, y, dm


def fitted(dm, targets: np.ndarray, columns: tuple[str, ...], fit: str) -> tuple[dict, dict]:
    """The run's own baseline (`baseline=physics_descriptors`) of `columns`, fitted on the
    training molecules by `fit`: what it found, and its values per set."""
    baseline = LinearBaseline(dm.featurizer, columns, name="physics_descriptors", fit=fit)
    baseline.open(dm.data.table, dm.data_dir, progress=False)
    facts = baseline.fit(dm.set_ids["train"], targets)
    return facts, {name: baseline.values(dm.set_ids[name]) for name in SETS}


def rmse(prediction: np.ndarray, y: np.ndarray) -> float:
    return float(np.sqrt(np.mean((prediction - y) ** 2)))


def kernel_ridge(z: dict, residual: dict, back: dict, y: dict) -> KernelRidge:
    """The grid's model with the lowest validation RMSE once `back` is added."""
    width = z["train"].shape[1]
    best = None
    for gamma in (0.1 / width, 0.3 / width, 1.0 / width):
        for alpha in (1e-2, 1e-1, 1.0):
            model = KernelRidge(kernel="rbf", gamma=gamma, alpha=alpha)
            model.fit(z["train"], residual)
            error = rmse(model.predict(z["val"]) + back["val"], y["val"])
            if best is None or error < best[0]:
                best = (error, model)
    return best[1]


def main() -> None:
    x, y, dm = features()
    mean = np.nanmean(x["train"], axis=0)
    scale = np.nanstd(x["train"], axis=0) + 1e-8
    z = {k: np.clip(np.nan_to_num((v - mean) / scale), -10, 10) for k, v in x.items()}
    counts = ", ".join(f"{k} {len(v)}" for k, v in y.items())
    print(f"lipophilicity, molecules with estimates: {counts}")
    print(
        "\n| baseline fit | line | slopes | alone: ID / OOD RMSE "
        "| kernel ridge on the rest: ID / OOD |"
    )
    print("|---|---|---|---|---|")
    rows = [("none", None, ""), *((" + ".join(c), c, fit) for c in COLUMNS for fit in LINES)]
    for label, columns, fit in rows:
        if columns is None:
            back = {k: np.zeros(len(v)) for k, v in y.items()}
            slopes, alone = "", ""
        else:
            facts, back = fitted(dm, y["train"], columns, fit)
            pairs = zip(facts["columns"], facts["slopes"], strict=True)
            slopes = ", ".join(f"{column} {slope:+.3f}" for column, slope in pairs)
            alone = f"{rmse(back['id'], y['id']):.3f} / {rmse(back['ood'], y['ood']):.3f}"
        model = kernel_ridge(z, y["train"] - back["train"], back, y)
        learned = {k: model.predict(z[k]) + back[k] for k in ("id", "ood")}
        both = f"{rmse(learned['id'], y['id']):.3f} / {rmse(learned['ood'], y['ood']):.3f}"
        print(f"| {label} | {fit} | {slopes} | {alone} | {both} |", flush=True)


if __name__ == "__main__":
    main()
