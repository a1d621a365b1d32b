"""BOOM's random forest (scikit-learn's) behind the same contract as the neural models."""

from __future__ import annotations

import numpy as np
import torch
from sklearn.ensemble import RandomForestRegressor

from oodmol import parallel
from oodmol.data.batches import VectorBatch
from oodmol.models.base import Prediction
from oodmol.models.fitted.base import FittedOnceModule
from oodmol.models.fitted.tree_arrays import ForestArrays

CHECKPOINT_KEY = "random_forest"
PICKLED_KEY = "sklearn_forest"  # older checkpoints: pickled bytes, never unpickled


class RandomForestModule(FittedOnceModule):
    """scikit-learn's random forest on the whole training set, inside Lightning.

    Fitted once on every training molecule (`FittedOnceModule`). Right after fitting,
    the forest is kept as plain arrays (`ForestArrays`): they are what predicts, in the
    run and after loading, and what the checkpoint holds, so a checkpoint loads with
    `weights_only=True` and runs no code. `n_params` reports the number of tree nodes.
    BOOM: 500 trees, `max_features='sqrt'`.
    """

    def __init__(
        self,
        n_estimators: int = 500,
        max_features: str | float = "sqrt",
        min_samples_leaf: int = 1,
        n_jobs: int = -1,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.n_estimators = n_estimators
        self.max_features = max_features
        self.min_samples_leaf = min_samples_leaf
        self.n_jobs = n_jobs
        self.seed = seed
        self.forest: ForestArrays | None = None

    def is_fitted(self) -> bool:
        return self.forest is not None

    def fit_training_set(
        self, x: np.ndarray, y: np.ndarray, weights: np.ndarray | None = None
    ) -> RandomForestRegressor:
        """Fit scikit-learn's forest (its trees' bootstrap and splits weighted by
        `weights`, where given) and keep its arrays; the fitted scikit-learn forest is
        returned (to compare with), not kept. A non-positive `n_jobs` (all cores, in
        scikit-learn) becomes the cores this run may use."""
        n_jobs = self.n_jobs if self.n_jobs > 0 else parallel.available_cores()
        forest = RandomForestRegressor(
            n_estimators=self.n_estimators,
            max_features=self.max_features,
            min_samples_leaf=self.min_samples_leaf,
            n_jobs=n_jobs,
            random_state=self.seed,
        )
        forest.fit(x, y, sample_weight=weights)
        self.forest = ForestArrays.from_sklearn(forest)
        return forest

    def predict_batch(self, batch: VectorBatch) -> Prediction:
        """Mean over trees, and the variance over trees as an epistemic estimate (the
        trees are fitted on bootstrap resamples: a bagging ensemble)."""
        if self.forest is None:
            raise RuntimeError("the random forest is used before it was fitted")
        per_tree = self.forest.predict_per_tree(batch.x.cpu().numpy())
        mean = torch.as_tensor(per_tree.mean(axis=0), dtype=torch.float32)
        var = torch.as_tensor(per_tree.var(axis=0), dtype=torch.float32)
        return Prediction(mean.to(self.device), var_epistemic=var.to(self.device))

    def n_params(self) -> int:
        return self.forest.n_nodes if self.forest is not None else 0

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        if self.forest is None:
            raise RuntimeError("a checkpoint of the random forest is saved before it was fitted")
        checkpoint[CHECKPOINT_KEY] = self.forest.to_checkpoint()

    def load_fit(self, checkpoint: dict, where: str) -> None:
        if CHECKPOINT_KEY not in checkpoint:
            found = (
                f"; its {PICKLED_KEY!r} entry holds an older oodmol's pickled forest, which is "
                "never unpickled (unpickling can run code): train the run again"
                if PICKLED_KEY in checkpoint
                else ""
            )
            raise ValueError(f"{where} holds no random forest ({CHECKPOINT_KEY!r}){found}")
        self.forest = ForestArrays.from_checkpoint(checkpoint[CHECKPOINT_KEY], where)
