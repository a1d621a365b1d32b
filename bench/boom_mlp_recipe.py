"""BOOM's MLP recipe as its script ran it, on our data: why BOOM's MLP trails ours.

BOOM's experiments/MLP/MLP_train.py fits scikit-learn's MLPRegressor (two hidden layers
of 300, random_state = seed, max_iter 2000, tol 0.1) on unscaled RDKit descriptors and
raw targets, over the whole pool (no validation hold-out). scikit-learn stops when the
training loss (half the MSE, in the target's units) has not improved by `tol` for 10
epochs: for a target whose variance is far below 0.1 (crystal density, 0.006 (g/cm³)²
over the pool), that stops training almost at once. Prints, per seed, the epochs trained
and the ID and OOD RMSE and R² (BOOM's: squared Pearson, binned over the OOD tails).

    python -m bench.boom_mlp_recipe csd10k_density --seeds 3
"""

from __future__ import annotations

import argparse

import numpy as np
from sklearn.neural_network import MLPRegressor

from oodmol.benchmark.benchmark_task import load
from oodmol.data.features import VectorFeatures
from oodmol.metrics.regression import binned_r2, pearson_r2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("task")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--tol", type=float, default=0.1, help="BOOM: 0.1")
    args = parser.parse_args()

    task = load(args.task, "ood")
    store = task._store("descriptors")
    sets = task.sets()
    pool = np.concatenate([sets["train"]["mol_id"], sets["val"]["mol_id"]])
    y = np.concatenate([sets["train"]["target"], sets["val"]["target"]]).astype(float)
    vectors = VectorFeatures(standardize=False)  # BOOM: descriptors as they come
    vectors.fit(store, pool)
    x = vectors.matrix(store, pool, "train")
    median = float(np.median(y))
    for seed in range(args.seeds):
        model = MLPRegressor(
            hidden_layer_sizes=(300, 300), random_state=seed, max_iter=2000, tol=args.tol
        ).fit(x, y)
        line = [f"{args.task} seed {seed}: {model.n_iter_} epochs"]
        for name in ("id", "ood"):
            frame = task.test[name]
            t = frame["target"].to_numpy(float)
            p = model.predict(vectors.matrix(store, frame["mol_id"].to_numpy(), name))
            rmse = float(np.sqrt(np.mean((p - t) ** 2)))
            r2 = binned_r2(t, p, median)["binned_pearson_r2"] if name == "ood" else pearson_r2(t, p)
            line.append(f"{name} RMSE {rmse:.4g} R² {r2:.3f}")
        print(" | ".join(line), flush=True)


if __name__ == "__main__":
    main()
