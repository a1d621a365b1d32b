"""Δ-learning (Ramakrishnan et al., JCTC 11, 2087, 2015): a model learns what a physics
estimate leaves of the property, and its predictions add the estimate back.

`LinearBaseline` reads one column of a physics feature cache (the task's
`physics_estimate`, oodmol.data.featurize.physics) and fits y ≈ a + b · estimate on the
training molecules alone (least squares); the run's model then trains on, and predicts,
the residual y − (a + b · estimate), for any model (forest, MLP, kernel regression,
graph networks), since only the targets change. A molecule without an estimate (no
geometry, an SCF that failed, an element without a reference) is left out of the run,
named and counted, as a molecule without features is.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from oodmol.data.featurize.base import Featurizer
from oodmol.data.store import FeatureStore
from oodmol.data.table import MoleculeTable


class LinearBaseline:
    """a + b · (one column of `featurizer`'s vectors), fitted on the training set."""

    def __init__(self, featurizer: Featurizer, column: str | None, name: str = "physics") -> None:
        columns = list(getattr(featurizer, "columns", ()))
        if column is None:
            raise ValueError(
                "baseline=physics needs the task's physics_estimate (configs/task/*.yaml): "
                "this task names no column that estimates its property"
            )
        if column not in columns:
            raise ValueError(f"baseline column {column!r} is not one of {columns}")
        self.featurizer = featurizer
        self.column = column
        self.name = name
        self.index = columns.index(column)
        self.store: FeatureStore | None = None
        self.intercept, self.slope = 0.0, 1.0

    def open(
        self,
        dataset: MoleculeTable,
        data_dir: Path,
        progress: bool,
        folder: str = "features",
        mol_ids: np.ndarray | None = None,
    ) -> None:
        """The estimates' cache of the data set, in `folder` of the data folder, holding
        at least `mol_ids` (None: every molecule; built where missing)."""
        self.store = FeatureStore.build_or_open(
            self.featurizer, dataset, Path(data_dir) / folder, progress=progress, mol_ids=mol_ids
        )

    def unusable(self, mol_ids: np.ndarray) -> dict[int, str]:
        """Those of `mol_ids` without an estimate, and why."""
        failed = self._opened().failed
        found = {int(i): failed[int(i)] for i in mol_ids if int(i) in failed}
        present = np.array([i for i in np.asarray(mol_ids).tolist() if i not in found], np.int64)
        if len(present):
            bad = ~np.isfinite(self.estimate(present))
            found |= {int(i): f"no finite {self.column} estimate" for i in present[bad]}
        return found

    def estimate(self, mol_ids: np.ndarray) -> np.ndarray:
        return self._opened().matrix(mol_ids)[:, self.index].astype(np.float64)

    def fit(self, mol_ids: np.ndarray, y: np.ndarray) -> dict:
        """Least squares of the training targets on the estimate; what it found."""
        x = self.estimate(mol_ids)
        design = np.stack([np.ones_like(x), x], axis=1)
        (self.intercept, self.slope), *_ = np.linalg.lstsq(design, y, rcond=None)
        residual = y - self.values(mol_ids)
        return {
            "name": self.name,
            "column": self.column,
            "intercept": float(self.intercept),
            "slope": float(self.slope),
            "train_rmse": float(np.sqrt(np.mean(residual**2))),
        }

    def values(self, mol_ids: np.ndarray) -> np.ndarray:
        """The baseline's prediction of each molecule, in the property's units."""
        return self.intercept + self.slope * self.estimate(mol_ids)

    def _opened(self) -> FeatureStore:
        if self.store is None:
            raise RuntimeError("LinearBaseline.open() first")
        return self.store
