"""Time the random forest's prediction from its arrays (`ForestArrays`, what the model
uses) against scikit-learn's per-tree `predict` loop (what it used before), on the same
forest and molecules, and check both give the same per-tree predictions bit for bit.

    python -m bench.forest_predict [--trees 500] [--train 8000] [--features 200]
        [--molecules 1000,4096,10000] [--repeats 3] [--n-jobs 1]

The forest is BOOM's (`max_features='sqrt'`, fully grown) fitted on random features with
a learnable target; `--n-jobs` only sets the fit's threads, prediction runs on one core.
Each timing is the best of `--repeats`. The last line per size is
`forest_predict n=<molecules> sklearn_s=<s> arrays_s=<s> ratio=<arrays/sklearn>`.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
from sklearn.ensemble import RandomForestRegressor

from oodmol.models.fitted.tree_arrays import ForestArrays


def best_seconds(predict: Callable[[], np.ndarray], repeats: int) -> tuple[float, np.ndarray]:
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = predict()
        seconds.append(time.perf_counter() - start)
    return min(seconds), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", type=int, default=500)
    parser.add_argument("--train", type=int, default=8000, help="training molecules")
    parser.add_argument("--features", type=int, default=200)
    parser.add_argument("--molecules", default="1000,4096,10000", help="sizes to predict")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--n-jobs", type=int, default=1, help="threads of the fit")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.train, args.features)).astype(np.float32)
    y = x[:, :10].sum(axis=1) + rng.normal(size=args.train)
    start = time.perf_counter()
    forest = RandomForestRegressor(
        n_estimators=args.trees, max_features="sqrt", n_jobs=args.n_jobs, random_state=0
    ).fit(x, y)
    arrays = ForestArrays.from_sklearn(forest)
    depth = max(tree.tree_.max_depth for tree in forest.estimators_)
    print(
        f"fitted {args.trees} trees on {args.train} x {args.features} in "
        f"{time.perf_counter() - start:.1f} s: {arrays.n_nodes} nodes, max depth {depth}"
    )
    for n in (int(size) for size in args.molecules.split(",")):
        x_new = rng.normal(size=(n, args.features)).astype(np.float32)
        old_s, old = best_seconds(
            lambda x_new=x_new: np.stack([tree.predict(x_new) for tree in forest.estimators_]),
            args.repeats,
        )
        new_s, new = best_seconds(lambda x_new=x_new: arrays.predict_per_tree(x_new), args.repeats)
        if not np.array_equal(old, new):
            raise AssertionError(f"n={n}: the arrays' predictions differ from scikit-learn's")
        print(
            f"forest_predict n={n} sklearn_s={old_s:.3f} arrays_s={new_s:.3f} "
            f"ratio={new_s / old_s:.2f}"
        )


if __name__ == "__main__":
    main()
