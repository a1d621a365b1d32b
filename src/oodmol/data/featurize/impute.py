"""Fill missing feature values from training statistics only."""

from __future__ import annotations

import numpy as np


class TrainImputer:
    """Replaces NaN/±inf by the column mean of the finite *training* values.

    `fit` sees only the training matrix, so validation and test molecules never leak
    into the fill values. A column with no finite training value is filled with 0.0
    (listed in `empty_columns`). Very large finite values are left as they are; a
    model that casts to float32 must scale or clip them itself.
    """

    def __init__(self) -> None:
        self.means: np.ndarray | None = None
        self.empty_columns: np.ndarray | None = None

    def fit(self, train: np.ndarray) -> TrainImputer:
        train = np.asarray(train, dtype=np.float64)
        finite = np.isfinite(train)
        counts = finite.sum(axis=0)
        sums = np.where(finite, train, 0.0).sum(axis=0)
        self.means = np.divide(sums, counts, out=np.zeros(train.shape[1]), where=counts > 0)
        self.empty_columns = np.flatnonzero(counts == 0)
        return self

    def transform(self, matrix: np.ndarray) -> tuple[np.ndarray, int]:
        """A filled copy of the matrix and the number of values filled."""
        if self.means is None:
            raise RuntimeError("TrainImputer.transform called before fit")
        missing = ~np.isfinite(matrix)
        filled = np.where(missing, self.means, matrix)
        return filled, int(missing.sum())
