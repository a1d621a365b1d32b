"""Facts about the training split that a model is built from: input widths, the elements
present, the average number of neighbours within a cutoff, per-element target offsets,
a vocabulary's size, an atom-reference prior.

A model's YAML declares which constructor argument receives which, under
`model.statistics` (a path inside `model.module`, and the statistic):

    statistics:
      backbone.in_dim: {_target_: oodmol.data.statistics.FeatureFact, name: in_dim}
      backbone.avg_num_neighbors:
        _target_: oodmol.data.statistics.AverageNeighbours
        cutoff: ${model.module.backbone.r_max}

They are computed from the run's training molecules only (never validation or test
ones), cached beside the data (`<data_dir>/statistics/`), and stored in every checkpoint,
so that a loaded model is rebuilt exactly, without the data.
"""

from __future__ import annotations

import hashlib
import json
import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from oodmol.data.features import FeatureSet
from oodmol.data.store import FeatureStore
from oodmol.io import atomic_write_json

log = logging.getLogger(__name__)


@dataclass
class TrainingSplit:
    """The training molecules of a run: their cached features, the feature set fitted on
    them, their ids and targets."""

    store: FeatureStore
    features: FeatureSet
    mol_ids: np.ndarray
    targets: np.ndarray

    def arrays(self, field: str) -> list[np.ndarray]:
        """One cached array per training molecule (e.g. `z`, `pos` of point clouds)."""
        molecules = self.store.iter_arrays(self.mol_ids)
        try:
            return [molecule[field] for molecule in molecules]
        except KeyError:
            raise ValueError(
                f"this statistic needs the features' {field!r} field, which "
                f"{self.store.meta['featurizer']['name']} features do not have"
            ) from None


class Statistic(ABC):
    """One fact about a training split; its settings (constructor arguments, plain
    values) and class identify it in the cache."""

    cached: ClassVar[bool] = True

    @abstractmethod
    def compute(self, train: TrainingSplit) -> Any:
        """The fact, as plain JSON values (numbers, lists, string-keyed dicts)."""

    def identity(self) -> dict:
        return {"statistic": f"{type(self).__module__}.{type(self).__qualname__}", **vars(self)}


class FeatureFact(Statistic):
    """A fact the fitted feature set knows (`FeatureSet.facts`): an input width such as
    `in_dim`, `atom_dim` or `bond_dim`, a vocabulary's size or padding id."""

    cached = False

    def __init__(self, name: str) -> None:
        self.name = name

    def compute(self, train: TrainingSplit) -> Any:
        facts = train.features.facts()
        if self.name not in facts:
            raise ValueError(
                f"the features ({type(train.features).__name__}) know {sorted(facts)}, "
                f"not {self.name!r}"
            )
        return facts[self.name]


class ElementsPresent(Statistic):
    """The sorted atomic numbers of the training molecules' atoms (point clouds)."""

    def compute(self, train: TrainingSplit) -> list[int]:
        return sorted({int(z) for numbers in train.arrays("z") for z in np.unique(numbers)})


class AverageNeighbours(Statistic):
    """The mean number of other atoms within `cutoff` Å of an atom, over every atom of the
    training molecules (MACE's `avg_num_neighbors`: edges / atoms of the radius graph)."""

    def __init__(self, cutoff: float) -> None:
        self.cutoff = float(cutoff)

    def compute(self, train: TrainingSplit) -> float:
        edges = atoms = 0
        for pos in train.arrays("pos"):
            pos = np.asarray(pos, dtype=np.float64)
            distances = np.linalg.norm(pos[:, None, :] - pos[None, :, :], axis=-1)
            edges += int((distances <= self.cutoff).sum()) - len(pos)  # not the atom itself
            atoms += len(pos)
        return edges / atoms if atoms else 0.0


def element_counts(numbers: list[np.ndarray]) -> tuple[np.ndarray, list[int]]:
    """How many atoms of each element every molecule has, [molecules, elements], and the
    elements (sorted atomic numbers) that index its columns."""
    elements = sorted({int(z) for z in np.concatenate(numbers)})
    column = {z: i for i, z in enumerate(elements)}
    counts = np.zeros((len(numbers), len(elements)))
    for row, molecule in enumerate(numbers):
        for z, n in zip(*np.unique(molecule, return_counts=True), strict=True):
            counts[row, column[int(z)]] = n
    return counts, elements


class ElementOffsets(Statistic):
    """Per-element contributions to the target fitted by least squares on the element
    counts of the training molecules (MACE's "E0s: average"): y ≈ Σ_e n_e(molecule) E_e.
    Returns {atomic number (as text): offset}."""

    def compute(self, train: TrainingSplit) -> dict[str, float]:
        counts, elements = element_counts(train.arrays("z"))
        offsets, *_ = np.linalg.lstsq(counts, np.asarray(train.targets, float), rcond=None)
        return {str(z): float(e) for z, e in zip(elements, offsets, strict=True)}


class AtomReferenceFit(Statistic):
    """The atom-reference prior of a regressor (`PropertyRegressor(atom_reference=...)`):
    the `ElementOffsets` and the mean and standard deviation of what they leave of the
    training targets, y − Σ_e n_e E_e, which the network then learns (standardised).
    Returns {"offsets": {atomic number: offset}, "residual_mean": m, "residual_std": s}."""

    def compute(self, train: TrainingSplit) -> dict[str, Any]:
        offsets = ElementOffsets().compute(train)
        counts, elements = element_counts(train.arrays("z"))
        prior = counts @ np.array([offsets[str(z)] for z in elements])
        residuals = np.asarray(train.targets, float) - prior
        spread = float(residuals.std(ddof=1)) if len(residuals) > 1 else 0.0
        return {
            "offsets": offsets,
            "residual_mean": float(residuals.mean()),
            "residual_std": spread if spread > 0 else 1.0,
        }


def compute_statistics(
    specs: dict[str, Statistic], train: TrainingSplit, cache_dir: Path | None
) -> dict[str, Any]:
    """Every declared statistic of a training split, from the cache where it is there."""
    return {path: _cached(statistic, train, cache_dir) for path, statistic in specs.items()}


def _cached(statistic: Statistic, train: TrainingSplit, cache_dir: Path | None) -> Any:
    if not statistic.cached or cache_dir is None:
        return statistic.compute(train)
    identity = {
        **statistic.identity(),
        "features": train.store.meta["key"],
        "molecules": hashlib.sha256(np.asarray(train.mol_ids, np.int64).tobytes()).hexdigest(),
        "targets": hashlib.sha256(np.asarray(train.targets, np.float64).tobytes()).hexdigest(),
    }
    key = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:20]
    path = Path(cache_dir) / f"{key}.json"
    if path.is_file():
        try:
            saved = json.loads(path.read_text())
            if isinstance(saved, dict) and saved.get("identity") == identity and "value" in saved:
                return saved["value"]
        except Exception:  # any damage (not UTF-8, not JSON, no memory for it): computed
            pass  # again and rewritten below, never a wrong value
    value = statistic.compute(train)
    try:
        atomic_write_json(path, {"identity": identity, "value": value})
    except OSError as error:  # a read-only data folder: compute it every time
        log.info("statistic not cached in %s (%s)", cache_dir, error)
    return value
