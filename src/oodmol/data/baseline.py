"""Δ-learning (Ramakrishnan et al., JCTC 11, 2087, 2015): a model learns what a physics
estimate leaves of the property, and its predictions add the estimate back.

`LinearBaseline` reads one column of a physics feature cache (the task's
`physics_estimate`, oodmol.data.featurize.physics), or several columns of a feature cache
(`baseline=physics_descriptors`: the physics estimates beside RDKit's descriptors), and
fits y ≈ a + Σ b_k · estimate_k on the training molecules alone (least squares, weighted
by the run's training weights where it has them, `weighting=tails`, so the line leans on
the ends of the range as the model does), each estimate with a slope of its own; the
run's model then trains on, and predicts, the residual, for any model (forest, MLP,
kernel regression, graph networks), since only the targets change. A molecule without
an estimate (no geometry, an SCF that failed, an element without a reference) is left
out of the run, named and counted, as a molecule without features is.

Two ways to find the line (`baseline.fit`). `least_squares` regresses the property on
the estimates: the best line for molecules like the training ones, but, where an
estimate is noisy, its slope is attenuated (regression dilution), so the line pulls
molecules at the ends of the range towards the training mean. An OOD split chooses its
test molecules by their property, so that pull is the tails' bias. `calibration`
regresses each estimate on the property, as one calibrates an instrument (x_k ≈ c_k +
d_k · y), and solves for the property (with several estimates, weighted by the inverse
covariance of what the regressions leave): for a molecule of any given property, its
value is unbiased wherever that property lies, at the price of the estimates' noise
carried over at full scale. The two lines share their direction: calibration stretches
the least-squares line about the training mean by 1/R². Both are lines in the estimates:
a checkpoint stores the intercept and slopes alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from difflib import get_close_matches
from pathlib import Path

import numpy as np

from oodmol.data.featurize.base import Featurizer
from oodmol.data.store import FeatureStore
from oodmol.data.table import MoleculeTable
from oodmol.errors import InputError
from oodmol.lines import DEFAULT_LINE, LINES


class LinearBaseline:
    """a + Σ b_k · (column k of `featurizer`'s vectors), fitted on the training set."""

    def __init__(
        self,
        featurizer: Featurizer,
        column: str | Sequence[str] | None,
        name: str = "physics",
        fit: str = DEFAULT_LINE,
    ) -> None:
        if fit not in LINES:
            raise InputError(
                f"fit={fit}: not a way to fit the baseline (use one of {tuple(LINES)})"
            )
        known = list(getattr(featurizer, "columns", ()))
        if column is None:
            raise InputError(  # not "baseline=...: ", which would read as a setting of its key
                f"this task names no column that estimates its property: baseline={name} "
                "needs the task's physics_estimate (configs/task/*.yaml) or baseline.column"
            )
        self.columns = [column] if isinstance(column, str) else [str(c) for c in column]
        given = f"column={self.columns if len(self.columns) != 1 else self.columns[0]}"
        for unknown in (c for c in self.columns if c not in known):
            close = get_close_matches(unknown, known, n=3)
            hint = f"did you mean {', '.join(close)}? " if close else ""
            raise InputError(
                f"{given}: {unknown} is not a column of {featurizer.name} "
                f"({hint}it has {len(known)})"
            )
        if not self.columns or len(set(self.columns)) < len(self.columns):
            raise InputError(f"{given}: give one column or more, each once")
        self.featurizer = featurizer
        self.name = name
        self.method = fit
        self.indices = [known.index(c) for c in self.columns]
        self.store: FeatureStore | None = None
        self.intercept, self.slopes = 0.0, np.ones(len(self.columns))

    @property
    def column(self) -> str:
        """The estimates' names, as messages give them."""
        return " + ".join(self.columns)

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
            bad = ~np.isfinite(self.estimate(present)).all(axis=1)
            found |= {int(i): f"no finite {self.column} estimate" for i in present[bad]}
        return found

    def estimate(self, mol_ids: np.ndarray) -> np.ndarray:
        """The estimates of each molecule, [n, columns]."""
        return self._opened().matrix(mol_ids)[:, self.indices].astype(np.float64)

    def fit(self, mol_ids: np.ndarray, y: np.ndarray, weights: np.ndarray | None = None) -> dict:
        """The line found on the training molecules and targets, each molecule counted by
        its weight (None: all alike), by the baseline's `fit` method; what it found."""
        x = self.estimate(mol_ids)
        w = np.ones(len(x)) if weights is None else np.asarray(weights, np.float64)
        y = np.asarray(y, np.float64)
        intercept, slopes = LINES[self.method](x, y, w)
        if not np.isfinite([intercept, *slopes]).all():  # calibration: no gain to invert
            raise InputError(
                f"baseline {self.column}: the estimates do not change with the property "
                f"on the training molecules, so fit={self.method} cannot solve for it "
                f"(use baseline.fit={DEFAULT_LINE})"
            )
        self.restore(intercept, slopes)
        residual = y - self.values(mol_ids)
        facts = {
            "name": self.name,
            "columns": list(self.columns),
            "intercept": float(self.intercept),
            "slopes": [float(b) for b in self.slopes],
            "weighted": weights is not None,
            "train_rmse": float(np.sqrt(np.mean(residual**2))),
        }
        if self.method != DEFAULT_LINE:  # the records of earlier runs stay as they were
            facts["fit"] = self.method
        return facts

    def restore(self, intercept: float, slopes: Sequence[float]) -> None:
        """A fit found before (a checkpoint's): one slope per column."""
        if len(slopes) != len(self.columns):
            raise ValueError(
                f"a fit of {len(slopes)} slope(s) for the {len(self.columns)} column(s) "
                f"{self.columns}"
            )
        self.intercept, self.slopes = float(intercept), np.asarray(slopes, dtype=np.float64)

    def values(self, mol_ids: np.ndarray) -> np.ndarray:
        """The baseline's prediction of each molecule, in the property's units."""
        return self.intercept + self.estimate(mol_ids) @ self.slopes

    def _opened(self) -> FeatureStore:
        if self.store is None:
            raise RuntimeError("LinearBaseline.open() first")
        return self.store
