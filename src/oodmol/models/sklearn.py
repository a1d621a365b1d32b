"""Classical models behind the same contract as the neural ones (BOOM's random forest)."""

from __future__ import annotations

import pickle

import numpy as np
import torch
from sklearn.ensemble import RandomForestRegressor

from oodmol.models.base import Prediction, Regressor


class RandomForestModule(Regressor):
    """scikit-learn's random forest on the whole training set, inside Lightning.

    It is fitted once, at the start of fitting (before Lightning's validation sanity
    check, which already asks for predictions), on every training molecule; the
    Lightning loop around it then only validates, tests and logs like any other model.
    The forest travels in the checkpoint as pickled bytes: load such a checkpoint only
    from a run you made yourself. `n_params` reports the number of tree nodes.
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
        self.automatic_optimization = False
        self.forest = RandomForestRegressor(
            n_estimators=n_estimators,
            max_features=max_features,
            min_samples_leaf=min_samples_leaf,
            n_jobs=n_jobs,
            random_state=seed,
        )
        self.fitted = False

    def on_fit_start(self) -> None:
        if self.fitted:  # resumed from a checkpoint that holds the forest
            return
        train = self.trainer.datamodule.datasets["train"]
        self.forest.fit(train.x.numpy(), train.y.numpy())
        self.fitted = True

    def training_step(self, batch: dict, batch_idx: int) -> None:
        """The forest was fitted in on_fit_start; one step of a zero-rate optimiser per
        epoch makes Lightning count it as training progress, so checkpoints (best.ckpt)
        and logs are written as for every other model."""
        if batch_idx == 0:
            self.optimizers().step()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        # A parameter outside the module: it is neither counted nor checkpointed.
        return torch.optim.SGD([torch.nn.Parameter(torch.zeros(()))], lr=0.0)

    def predict_batch(self, batch: dict) -> Prediction:
        """Mean over trees, and the variance over trees as an epistemic estimate (the
        trees are fitted on bootstrap resamples: a bagging ensemble)."""
        if not self.fitted:
            raise RuntimeError("the random forest is used before it was fitted")
        x = batch["x"].cpu().numpy()
        per_tree = np.stack([tree.predict(x) for tree in self.forest.estimators_])
        mean = torch.as_tensor(per_tree.mean(axis=0), dtype=torch.float32)
        var = torch.as_tensor(per_tree.var(axis=0), dtype=torch.float32)
        return Prediction(mean.to(self.device), var_epistemic=var.to(self.device))

    def n_params(self) -> int:
        return int(sum(t.tree_.node_count for t in self.forest.estimators_)) if self.fitted else 0

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["sklearn_forest"] = pickle.dumps(self.forest) if self.fitted else b""

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        if checkpoint.get("sklearn_forest"):
            self.forest = pickle.loads(checkpoint["sklearn_forest"])
            self.fitted = True
