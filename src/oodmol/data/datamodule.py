"""MoleculeDataModule: one task, one persisted split, one feature cache, four loaders."""

from __future__ import annotations

import logging
import numbers
from collections.abc import Iterator
from pathlib import Path

import lightning as L
import numpy as np
import torch
from lightning.pytorch.trainer.states import TrainerFn
from torch.utils.data import DataLoader

from oodmol.data.baseline import LinearBaseline
from oodmol.data.features import FeatureSet
from oodmol.data.featurize.base import Featurizer
from oodmol.data.geometry_checks import GeometryReport, check_store
from oodmol.data.residency import DeviceResidency
from oodmol.data.sampling import EpochShuffle
from oodmol.data.splits.assignment import (
    VAL_TAIL,
    EmptySetError,
    SplitAssignment,
    empty_sets,
)
from oodmol.data.splits.splitters import Splitter
from oodmol.data.statistics import Statistic, TrainingSplit, compute_statistics
from oodmol.data.store import FeatureStore
from oodmol.data.subsets import offer_order, offered
from oodmol.data.task import Task, TaskData, load_split, load_task
from oodmol.data.weighting import TailWeights
from oodmol.errors import InputError

log = logging.getLogger(__name__)
TEST_SETS = ("id", "ood")  # the sets a run is scored on
# test dataloader order (dataloader_idx 0, 1, 2): the validation set is predicted too, for
# recalibrating uncertainties and for combining ensemble members afterwards
PREDICTED_SETS = (*TEST_SETS, "val")
# what each validation set's metrics are logged as where a run has two
OWN_PREFIX = {"val": "val_id", VAL_TAIL: "val_tail"}


class MoleculeDataModule(L.LightningDataModule):
    """Train, validation, ID-test and OOD-test loaders of a task.

    `prepare_data` (one process) validates the data set, writes the split file and
    builds the feature cache, once however often it is called; `setup` (every process)
    only reads them, or reuses what `prepare_data` loaded in this process. Target statistics
    and feature statistics come from the training set alone.

    Molecules the featuriser could not represent (a 3D conformer that could not be
    made) are left out of every set of this run, counted per set and named in the log
    and in the run's metrics (`data.left_out`). `max_molecules` keeps a seeded random
    subset of at most that many molecules per set, for quick runs on large data sets
    (QM9), and featurises only those (`oodmol.data.subsets`); the subset is recorded with
    the run's data facts.

    With a `baseline` (Δ-learning, `oodmol.data.baseline`), fitted on the training
    molecules, the model's targets are what it leaves of the property (`model_targets`,
    `train_targets`); `targets` stay the property's, and the run's predictions add
    `offsets` back. A molecule without the baseline's estimate is left out like one
    without features. `baseline_fit` (a checkpoint's: intercept, slopes) takes the place
    of the fit: a trained model is scored with the line it learnt the residual of.

    With `bootstrap_seed` the training *dataset* is a resample of the training molecules
    with replacement (same size, seeded), for bootstrap ensembles; feature and target
    statistics stay those of the whole training set, so every member reads the same
    inputs, and validation and test sets are unchanged.

    Training batches are drawn in an order fixed by `seed` and the epoch (`EpochShuffle`),
    and every loader has a random generator of its own, so that the global one serves
    the model alone. Its `state_dict` (saved in every checkpoint) holds how far training
    got in the current epoch; a run resumed from it goes on with the next batch that the
    uninterrupted run would have drawn.

    On a GPU, sets that fit stay on the device and are batched there
    (`data_on_device`, `oodmol.data.residency`).

    Token sets batch molecules of like length together (less padding). With
    `group_by_size`, sets of molecular graphs and point clouds do so by atom count, for
    models on dense padded pair tensors (GeoFormer), whose memory grows with the largest
    molecule of a batch squared; every molecule is still drawn once per epoch, in an
    order fixed by the seed and the epoch (`EpochShuffle`), and evaluation batches go
    smallest first.
    """

    def __init__(
        self,
        task: Task,
        split: Splitter,
        featurizer: Featurizer,
        features: FeatureSet,
        data_dir: str,
        batch_size: int = 64,
        eval_batch_size: int = 512,
        num_workers: int = 0,
        progress: bool = True,
        bootstrap_seed: int | None = None,
        max_molecules: int | None = None,
        seed: int = 0,
        holdout: bool = True,
        group_by_size: bool = False,
        geometry_filter: dict[str, Featurizer] | None = None,
        baseline: LinearBaseline | None = None,
        baseline_fit: dict | None = None,
        weighting: TailWeights | None = None,
        data_on_device: str | bool = "auto",
    ) -> None:
        super().__init__()
        self.task = task
        self.splitter = split
        self.featurizer = featurizer
        self.features = features
        self.data_dir = Path(data_dir)
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size
        self.num_workers = num_workers
        self.residency = DeviceResidency(data_on_device)
        self.progress = progress
        self.bootstrap_seed = bootstrap_seed
        self.max_molecules = checked_max_molecules(max_molecules)
        self.seed = seed
        self.holdout = holdout
        self.group_by_size = group_by_size
        self.geometry_filter = dict(geometry_filter or {})
        self.geometry_reports: dict[str, GeometryReport] = {}
        self.baseline = baseline
        self.baseline_fit = baseline_fit
        self.weighting = weighting
        self.train_weights: np.ndarray | None = None
        self.set_offsets: dict[str, np.ndarray] = {}
        self.resume_position: dict[str, int] | None = None
        self.set_ids: dict[str, np.ndarray] = {}
        self.data: TaskData | None = None
        self.split: SplitAssignment | None = None
        self.store: FeatureStore | None = None
        self.datasets: dict = {}
        self.orders: dict[str, np.ndarray] = {}
        self.no_features: dict[int, str] = {}

    def prepare_data(self) -> None:
        # Called by train.py and again by Lightning's fit and test: the work is done once.
        if self.store is None:
            self._load(self.progress)

    def _load(self, progress: bool) -> None:
        """The task's data, split and feature caches (built, where missing, by this
        process), kept for `setup` in the same process. With `max_molecules` the caches
        need only the molecules the run looks at (`oodmol.data.subsets`): those are
        featurised, and where some cannot be used, the next ones of their sets."""
        self.data = load_task(self.task, self.data_dir, progress)
        self.split = load_split(self.data, self.splitter, self.data_dir)
        self.orders = {
            name: offer_order(ids, name, self.max_molecules, self.splitter)
            for name, ids in self._pools().items()
        }
        if self.max_molecules is None:
            self._open_caches(None, progress)
            return
        wanted = self._looked_at(np.empty(0, dtype=np.int64))
        while True:
            self._open_caches(wanted, progress)
            more = self._looked_at(self._unusable())
            if np.isin(more, wanted).all():
                return
            wanted = np.union1d(wanted, more)

    def _pools(self) -> dict[str, np.ndarray]:
        """The molecules of each set of the split. Without a `holdout`, the validation
        molecules train too (BOOM's protocol: the whole pool but the test sets) and the
        run has no validation set."""
        sets = dict(self.split.sets)
        if not self.holdout:
            held = [name for name in ("val", VAL_TAIL) if name in sets]
            sets["train"] = np.sort(np.concatenate([sets["train"], *(sets[n] for n in held)]))
            sets.update({name: sets[name][:0] for name in held})
        return sets

    def _looked_at(self, unusable: np.ndarray) -> np.ndarray:
        """Every molecule the run looks at, given those known to be `unusable`."""
        looked = [offered(order, self.max_molecules, unusable) for order in self.orders.values()]
        return np.unique(np.concatenate(looked))

    def _open_caches(self, mol_ids: np.ndarray | None, progress: bool) -> None:
        """The feature cache, and those of the geometry filter with their checks, holding
        at least `mol_ids` (None: every molecule of the data set)."""
        features = self.data_dir / "features"
        dataset = self.data.dataset
        self.store = FeatureStore.build_or_open(
            self.featurizer, dataset, features, progress=progress, mol_ids=mol_ids
        )
        for name, featurizer in self.geometry_filter.items():
            store = FeatureStore.build_or_open(
                featurizer, dataset, features, progress=progress, mol_ids=mol_ids
            )
            self.geometry_reports[name] = check_store(
                store, dataset, name, progress, mol_ids=mol_ids
            )
        if self.baseline is not None:
            self.baseline.open(dataset, self.data_dir, progress, mol_ids=mol_ids)
        held = np.concatenate(list(self.split.sets.values())) if mol_ids is None else mol_ids
        self.no_features = self._without_features(held)

    def _without_features(self, mol_ids: np.ndarray) -> dict[int, str]:
        """The molecules without features, or (with a baseline) among `mol_ids` without
        its estimate, and why."""
        failed = self.store.failed
        if self.baseline is not None:  # no estimate: no baseline to learn from
            failed = {**self.baseline.unusable(mol_ids), **failed}
        return failed

    def _unusable(self) -> np.ndarray:
        """The molecules without features, or failing a geometry's checks."""
        unusable = set(self.no_features)
        unusable.update(mol_id for r in self.geometry_reports.values() for mol_id in r.failed)
        return np.array(sorted(unusable), dtype=np.int64)

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        if self.store is None:  # a process where prepare_data did not run (DDP ranks)
            self._load(progress=False)
        store = self.store
        left_out = self._select_molecules(store)
        self._check_no_empty_set(left_out)
        feature_facts = self.features.fit(store, self.set_ids["train"])
        weights = None if self.weighting is None else self.weighting(self.targets("train"))
        baseline_facts = self._fit_baseline(weights)
        for name in self.set_ids:
            ids = self.set_ids[name]
            y = self.model_targets(name)
            if name == "train" and self.bootstrap_seed is not None:
                rng = np.random.default_rng(self.bootstrap_seed)
                draw = rng.choice(len(ids), size=len(ids), replace=True)
                ids, y = ids[draw], y[draw]
                weights = None if weights is None else weights[draw]
            self.datasets[name] = self.features.dataset(store, ids, y, name)
        self.train_weights = weights
        facts = {
            **feature_facts,
            "imputed_values": dict(self.features.imputed),
            "left_out": left_out,
            "sizes_used": {name: len(ids) for name, ids in self.set_ids.items()},
        }
        if self.geometry_filter:
            facts["geometry_filter"] = self.filter_facts
        if baseline_facts:
            facts["baseline"] = baseline_facts
        if weights is not None:
            facts["weighting"] = self.weighting.facts(weights)
        log.info("features of %s: %s", self.task.name, facts)
        self.feature_facts = facts

    def _fit_baseline(self, weights: np.ndarray | None) -> dict | None:
        """The baseline fitted on the training molecules (with the run's training weights,
        if any), or the fit given, and its values for every set."""
        if self.baseline is None:
            self.set_offsets = {n: np.zeros(len(ids)) for n, ids in self.set_ids.items()}
            return None
        if self.baseline_fit is None:
            facts = self.baseline.fit(self.set_ids["train"], self.targets("train"), weights)
        else:
            facts = dict(self.baseline_fit)
            self.baseline.restore(facts["intercept"], facts["slopes"])
        self.set_offsets = {n: self.baseline.values(ids) for n, ids in self.set_ids.items()}
        return facts

    def _select_molecules(self, store: FeatureStore) -> dict:
        """The molecules of each set this run uses (`set_ids`): every one it looks at
        (`_looked_at`) but those without features (or the baseline's estimate) or failing
        the geometry filter; returns how many of those it left out for want of features,
        per set, with examples."""
        failed = self.no_features
        failed_ids = np.fromiter(failed, dtype=np.int64, count=len(failed))
        filtered = {mol_id for report in self.geometry_reports.values() for mol_id in report.failed}
        filtered_ids = np.fromiter(sorted(filtered), dtype=np.int64, count=len(filtered))
        unusable = np.union1d(failed_ids, filtered_ids)
        self.filter_facts = {
            "geometries": {n: r.summary() for n, r in self.geometry_reports.items()},
            "left_out": {},
        }
        left_out: dict = {}
        for name in self.split.names():
            ids = offered(self.orders[name], self.max_molecules, unusable)
            checked = np.isin(ids, filtered_ids) & ~np.isin(ids, failed_ids)
            if checked.any():
                self.filter_facts["left_out"][name] = int(checked.sum())
            missing = np.isin(ids, failed_ids)
            if missing.any():
                left_out[name] = int(missing.sum())
            self.set_ids[name] = np.sort(ids[~np.isin(ids, unusable)])
        if left_out:
            examples = [f"{k} ({failed[k]})" for k in sorted(failed)[:5]]
            missing = f"{store.meta['featurizer']['name']} features"
            if self.baseline is not None:
                missing += f" or {self.baseline.column} estimate"
            log.warning(
                "%s: %d molecules have no %s and are left out of this run (%s); e.g. mol_id %s",
                self.task.name,
                sum(left_out.values()),
                missing,
                ", ".join(f"{name} {n}" for name, n in left_out.items()),
                "; ".join(examples),
            )
            left_out["examples"] = examples
        return left_out

    def _check_no_empty_set(self, left_out: dict) -> None:
        """Every set still has molecules after those without features are left out;
        otherwise the run would stop mid-way or score nothing."""
        sizes = {name: len(ids) for name, ids in self.set_ids.items()}
        empty = [n for n in empty_sets(sizes) if self.holdout or n not in ("val", VAL_TAIL)]
        if not empty:
            return
        planned = self.split.sizes()
        shown = ", ".join(f"{name} {n}" for name, n in planned.items())
        n_failed = sum(n for name, n in left_out.items() if name != "examples")
        failures = (
            f"{n_failed} left out for lack of {self.featurizer.name} features "
            f"(e.g. mol_id {left_out['examples'][0]}); "
            if n_failed
            else ""
        )
        raise EmptySetError(
            sizes,
            f"{self.task.name}: of the split's {sum(planned.values())} molecules ({shown}), "
            "this run uses",
            f"{failures}make the sets larger (task.ood_size, split.id_fraction, "
            "split.val_fraction), use more molecules, or a featuriser that represents them",
        )

    # Facts the model and the evaluation need, all from the training set.
    def statistics(self, specs: dict[str, Statistic]) -> dict:
        """The declared statistics (`oodmol.data.statistics`) of this run's training
        molecules, cached in the data folder."""
        train = TrainingSplit(self.store, self.features, self.set_ids["train"], self.train_targets)
        return compute_statistics(specs, train, self.data_dir / "statistics")

    @property
    def train_targets(self) -> np.ndarray:
        """What the model trains on: the property, or what the baseline leaves of it."""
        return self.model_targets("train")

    def targets(self, name: str) -> np.ndarray:
        """The property's values of a set's molecules."""
        return self.data.y[self.data.table.rows_of(self.set_ids[name])]

    def offsets(self, name: str) -> np.ndarray:
        """What the baseline predicts for a set's molecules (0 without one): the run's
        predictions are the model's plus these."""
        return self.set_offsets[name]

    def model_targets(self, name: str) -> np.ndarray:
        return self.targets(name) - self.offsets(name)

    def mol_ids(self, name: str) -> np.ndarray:
        return self.set_ids[name]

    def smiles(self, name: str) -> np.ndarray:
        return self.data.table.smiles[self.data.table.rows_of(self.set_ids[name])]

    def _loader(self, name: str, shuffle: EpochShuffle | None = None) -> DataLoader:
        """The training loader with its `shuffle`; an evaluation loader in order, or
        shortest molecules first where batches group by size (less padding)."""
        lengths = self._sizes(self.datasets[name])
        order = None if lengths is None else np.argsort(lengths, kind="stable").tolist()
        dataset = self.residency.dataset(name, self.datasets[name], self._device())
        on_host = not self.residency.holds(dataset)
        workers = self.num_workers if on_host else 0  # gathered on the device: no workers
        return DataLoader(
            dataset,
            batch_size=self.batch_size if shuffle is not None else self.eval_batch_size,
            sampler=shuffle if shuffle is not None else order,
            num_workers=workers,
            collate_fn=self.features.collate,
            persistent_workers=workers > 0,
            pin_memory=on_host and self._on_cuda(),
            generator=torch.Generator().manual_seed(self.seed),
        )

    def _device(self) -> torch.device | None:
        """The device the run's model is on, once a trainer holds this module."""
        trainer = self.trainer
        return None if trainer is None else trainer.strategy.root_device

    def _on_cuda(self) -> bool:
        """Whether batches go to a CUDA device: then they are pinned, so that their
        copies overlap with compute (pinned host memory needs CUDA to exist)."""
        device = self._device()
        return device is not None and device.type == "cuda"

    def _sizes(self, dataset) -> np.ndarray | None:
        """The per-molecule sizes batches are grouped by: a token set's lengths always,
        atom counts with `group_by_size`; None: no grouping."""
        lengths = getattr(dataset, "lengths", None)
        if lengths is not None or not self.group_by_size:
            return lengths
        sizes = getattr(dataset, "atom_counts", None)
        if sizes is None:
            raise ValueError(
                f"group_by_size needs molecules with atoms (graphs or point clouds); "
                f"{type(dataset).__name__} of {type(self.features).__name__} has none"
            )
        return sizes

    def train_dataloader(self) -> DataLoader:
        trainer = self.trainer
        replicas, rank = (trainer.world_size, trainer.global_rank) if trainer else (1, 0)
        sampler = self._sampler(self.batch_size, replicas, rank)
        loader = self._loader("train", sampler)
        if self.resume_position is not None:
            epoch, batches = self.resume_position["epoch"], self.resume_position["batches"]
            if batches >= len(loader):  # saved at the end of an epoch
                epoch, batches = epoch + 1, 0
            sampler.resume_at(epoch, batches * self.batch_size)
            self.resume_position = None
        return loader

    def _sampler(self, batch_size: int, replicas: int, rank: int) -> EpochShuffle:
        dataset = self.datasets["train"]
        lengths = self._sizes(dataset)
        return EpochShuffle(
            dataset, self.seed, replicas, rank, lengths, batch_size, self.train_weights
        )

    def training_orders(
        self, batch_size: int, epochs: int, replicas: int = 1
    ) -> Iterator[np.ndarray]:
        """The training set's indices in the order the training loader draws them with
        `batch_size`, one array per epoch and process (`replicas`), epoch by epoch; the
        loader cuts each into batches of `batch_size`. The memory planner sizes a run's
        training steps by them."""
        samplers = [self._sampler(batch_size, replicas, rank) for rank in range(replicas)]
        for epoch in range(epochs):
            for sampler in samplers:
                sampler.set_epoch(epoch)
                yield np.fromiter(sampler, dtype=np.int64)

    def test_dataloader(self) -> list[DataLoader]:
        return [self._loader(name) for name in self.predicted_sets()]

    def predicted_sets(self) -> list[str]:
        """The sets a run's test predicts, in its loaders' order: ID, OOD and, where
        the run holds one out, validation."""
        return [name for name in PREDICTED_SETS if len(self.set_ids[name])]

    def validation_sets(self) -> list[str]:
        """The sets validated every epoch, in the validation loaders' order: `val`, and
        `val_tail` where the split has one (split.val=tail)."""
        return [n for n in ("val", VAL_TAIL) if n in self.set_ids and len(self.set_ids[n])]

    def validation_logs(self) -> list[list[str]]:
        """Per validation loader, the prefixes its metrics are logged under, its own name
        first. `val_*` (`val_loss`: what selects the tested checkpoint, stops early and
        scores a search's trial) is the selection set's: `val_tail` where the split has
        one, else `val`. With two sets each is also logged as its own, `val_id_*` and
        `val_tail_*`, which nothing monitors."""
        sets = self.validation_sets()
        if len(sets) == 1:
            return [["val"]]
        return [[OWN_PREFIX[name], *(["val"] if name == VAL_TAIL else [])] for name in sets]

    def val_dataloader(self) -> DataLoader | list:
        loaders = [self._loader(name) for name in self.validation_sets()]
        return loaders[0] if len(loaders) == 1 else loaders

    def state_dict(self) -> dict[str, dict[str, int]]:
        """How far training got: the epoch, and the batches of it already trained."""
        trainer = self.trainer
        if trainer is None or trainer.state.fn != TrainerFn.FITTING:
            return {}
        progress = trainer.fit_loop.epoch_loop.batch_progress.current
        return {"train_position": {"epoch": trainer.current_epoch, "batches": progress.processed}}

    def load_state_dict(self, state_dict: dict) -> None:
        self.resume_position = state_dict.get("train_position")


def checked_max_molecules(value: object) -> int | None:
    """None (every molecule) or a positive whole number, refused before any data is
    loaded: Hydra passes `max_molecules=abc` on as a string and `2.5` as a float."""
    if value is None:
        return None
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and value > 0:
        return int(value)
    raise InputError(
        f"max_molecules must be a positive whole number (molecules per set), or null for "
        f"all of them; got {value!r} ({type(value).__name__})"
    )
