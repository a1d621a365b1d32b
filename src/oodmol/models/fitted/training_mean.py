"""The training set's mean for every molecule: the reference every model must beat, and,
with a baseline (`baseline=physics`), the baseline alone (its line fitted on the training
molecules), since the mean of what a least-squares line leaves is zero."""

from __future__ import annotations

import numpy as np
import torch

from oodmol.data.batches import Batch
from oodmol.models.base import Prediction
from oodmol.models.fitted.base import FittedOnceModule


class TrainingMeanModule(FittedOnceModule):
    """Predicts the mean of the training targets (the model's targets: what a baseline
    leaves, with one) for every molecule; its features are never read."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros((), dtype=torch.float64))
        self.register_buffer("fitted", torch.zeros((), dtype=torch.bool))

    def is_fitted(self) -> bool:
        return bool(self.fitted)

    def fit_training_set(
        self, x: np.ndarray, y: np.ndarray, weights: np.ndarray | None = None
    ) -> float:
        self.mean.fill_(float(np.average(y, weights=weights)))
        self.fitted.fill_(True)
        return float(self.mean)

    def predict_batch(self, batch: Batch) -> Prediction:
        return Prediction(self.mean.expand(len(batch)).float().to(self.device).clone())

    def n_params(self) -> int:
        return 0
