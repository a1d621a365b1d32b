"""A benchmark task as plain tables: the molecules of every set of a task's split, as
train.py uses them, and the scoring of any model's predictions on them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict

from oodmol.bounded import MB, check_size, read_json
from oodmol.config import benchmark_tasks, compose_config, config_dir
from oodmol.data.splits.assignment import SETS, SplitAssignment
from oodmol.data.store import FeatureStore
from oodmol.data.task import TaskData, load_split, load_task
from oodmol.errors import InputError, MissingFileError, UserError
from oodmol.io import atomic_write_json
from oodmol.names import check_name
from oodmol.overrides import compose_checked
from oodmol.stored_config import rebuild

TEST_SETS = ("id", "ood")
MAX_TASK_BYTES, MAX_SET_BYTES = 64 * MB, 1024 * MB  # QM9's: under 1 MB and 20 MB
COLUMNS = ["mol_id", "smiles", "target"]


def tasks() -> list[str]:
    """The benchmark's tasks (BOOM's 11). A user's own file is the task "csv", loaded with
    `load("csv", path=..., target_column=...)`.

    >>> "csd10k_density" in tasks() and "qm9_homo" in tasks()
    True
    """
    return benchmark_tasks("boom")


def load(
    task: str,
    split: str = "ood",
    seed: int = 0,
    *,
    path: str | Path | None = None,
    target_column: str | None = None,
    overrides: list[str] | None = None,
) -> BenchmarkTask:
    """The task's sets as train.py composes them for `task=<task> split=<split>
    seed=<seed>`: the same validated data and split file (in `OODMOL_DATA_DIR`, built
    there when missing), hence the very molecules of every set. The sets do not depend
    on the seed; it is the seed a scored model's run is recorded with.

    `path` and `target_column` make a user's CSV the task ("csv"); `overrides` are any
    other config overrides (e.g. `["task.ood_size=50"]`).

    >>> b = load("csv", path=tiny_csv, target_column="y", overrides=["task.ood_size=20"])
    >>> sorted(b.test), list(b.test["ood"].columns), len(b.test["ood"])
    (['id', 'ood'], ['mol_id', 'smiles', 'target'], 20)
    """
    settings = [f"task={task}", f"split={split}", f"+seed={seed}", "progress=false"]
    if path is not None:
        settings.append(f"task.path={Path(path).resolve()}")
    if target_column is not None:
        settings.append(f"task.target_column={target_column}")
    cfg = compose_checked("data", [*settings, *(overrides or [])])
    data_dir = Path(cfg.paths.data_dir)
    data = load_task(instantiate(cfg.task), data_dir, progress=False)
    assignment = load_split(data, instantiate(cfg.split), data_dir)
    return BenchmarkTask.from_data(cfg, data, assignment)


@dataclass
class BenchmarkTask:
    """One task's sets as DataFrames (`mol_id`, `smiles`, `target`) and its card.

    `train` and `val` are the training and validation sets; `test` holds "id" and "ood".
    The card holds the sizes, the property and its unit, the split (its hash and, for
    the KDE split, where the OOD tails begin) and the data checksums.
    """

    name: str
    split: str
    seed: int
    train: pd.DataFrame
    val: pd.DataFrame
    test: dict[str, pd.DataFrame]
    card: dict[str, Any]
    config: dict = field(repr=False, default_factory=dict)  # the task's resolved config

    @classmethod
    def from_data(cls, cfg: DictConfig, data: TaskData, split: SplitAssignment) -> BenchmarkTask:
        frames = {name: _frame(data, split.sets[name]) for name in SETS}
        card = _card(data, split, frames, cfg)
        return cls(
            name=data.task.name,
            split=str(cfg.split.name),
            seed=int(cfg.seed),
            train=frames["train"],
            val=frames["val"],
            test={name: frames[name] for name in TEST_SETS},
            card=card,
            config={"task": OmegaConf.to_container(cfg.task, resolve=True)},
        )

    def evaluate(self, predictions: dict, **options: Any) -> dict:
        """Score predictions of the test sets exactly as a train.py run is scored; see
        `oodmol.benchmark.evaluation.evaluate` for the options (sigma, val, name, save_to).

        Examples:
            >>> b = load("csv", path=tiny_csv, target_column="y", overrides=["task.ood_size=20"])
            >>> mean = b.train["target"].mean()
            >>> metrics = b.evaluate({s: [mean] * len(b.test[s]) for s in b.test}, name="mean")
            >>> metrics["model"], metrics["ood"]["n"], round(metrics["ood"]["rmse"], 3) > 0
            ('mean', 20, True)
        """
        from oodmol.benchmark.evaluation import evaluate

        return evaluate(self, predictions, **options)

    def features(self, kind: str = "descriptors") -> dict[str, pd.DataFrame]:
        """The cached vectors of `kind` for every set, indexed by mol_id, as cached (before
        imputation or scaling, which a model fits on `train` alone): a representation of
        configs/model/representation/ (descriptors, physics, soap), the very featuriser a
        vector model reads on this task, or a featuriser of configs/featurizer/ giving one
        vector per molecule (morgan)."""
        store = self._store(kind)
        return {
            name: pd.DataFrame(store.matrix(frame["mol_id"]), index=frame["mol_id"].to_numpy())
            for name, frame in self.sets().items()
        }

    def conformers(self, set_name: str) -> list[tuple[np.ndarray, np.ndarray]]:
        """(atomic numbers, coordinates in Å) of each molecule of a set, from the 3D
        cache (QM9's DFT geometries, or the conformers 3D models read); molecules
        without a conformer are absent (`store.failed` names them)."""
        store = self._store("graph3d")
        ids = [i for i in self.sets()[set_name]["mol_id"] if int(i) not in store.failed]
        return [(m["z"], m["pos"]) for m in store.iter_arrays(ids)]

    def sets(self) -> dict[str, pd.DataFrame]:
        return {"train": self.train, "val": self.val, **self.test}

    def _store(self, kind: str) -> FeatureStore:
        cfg = self._rebuilt(f"{self.name}'s task")
        featurizer = instantiate(featurizer_config(kind, cfg.task))
        data_dir = Path(cfg.paths.data_dir)  # this installation's data folder
        data = load_task(instantiate(cfg.task), data_dir, progress=False)
        return FeatureStore.build_or_open(
            featurizer, data.dataset, data_dir / "features", progress=False
        )

    def _rebuilt(self, source: str) -> DictConfig:
        """The task's config rebuilt from this installation's configs (a saved folder
        may have been received: `oodmol.stored_config`)."""
        return rebuild({"task": self.config.get("task")}, source, ("task",), "data")

    def save(self, folder: str | Path) -> Path:
        """Write the sets (Parquet) and the card and config (JSON) into `folder`."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        for name, frame in self.sets().items():
            frame.to_parquet(folder / f"{name}.parquet", index=False)
        atomic_write_json(
            folder / "task.json",
            {"name": self.name, "split": self.split, "seed": self.seed, "card": self.card,
             "config": self.config},
        )  # fmt: skip
        return folder

    @classmethod
    def read(cls, folder: str | Path) -> BenchmarkTask:
        """A task written by `save`, as it was."""
        folder = Path(folder)
        description = folder / "task.json"
        if not description.is_file():
            raise MissingFileError(f"{description}: no such file (BenchmarkTask.save writes it)")
        try:
            saved = read_json(description, "saved task", MAX_TASK_BYTES)
            config = {"task": saved["config"]["task"]}
            described = {key: saved[key] for key in ("name", "split", "seed", "card")}
            for key in ("name", "split"):
                check_name(described[key], f"{description}: {key}")
            for name in SETS:
                check_size(folder / f"{name}.parquet", MAX_SET_BYTES, "saved set")
            frames = {name: pd.read_parquet(folder / f"{name}.parquet") for name in SETS}
        except (ValueError, KeyError, TypeError, OSError) as error:
            if isinstance(error, UserError):
                raise
            raise InputError(
                f"{folder}: not a task BenchmarkTask.save wrote ({type(error).__name__}: {error})"
            ) from None
        test = {name: frames[name] for name in TEST_SETS}
        task = cls(**described, train=frames["train"], val=frames["val"], test=test, config=config)
        task._rebuilt(str(description))  # refused here, before anything uses it
        return task


def featurizer_config(kind: str, task: DictConfig) -> DictConfig:
    """The featuriser `kind` as train.py builds it for `task` (whose settings it may
    read: the QM9 tasks' solvents of the physics estimates, a data set's elements for
    SOAP), so that the vectors are those of its runs' cache."""
    if (config_dir() / "model" / "representation" / f"{kind}.yaml").is_file():
        cfg = compose_config("train", ["model=ridge", f"model/representation={kind}"])
        chosen = "model.representation.featurizer"
    elif (config_dir() / "featurizer" / f"{kind}.yaml").is_file():
        cfg = compose_config("train", ["model=ridge"])
        with open_dict(cfg):
            cfg.api_featurizer = OmegaConf.load(config_dir() / "featurizer" / f"{kind}.yaml")
        chosen = "api_featurizer"
    else:
        raise InputError(
            f"features({kind!r}): no representation or featuriser of that name (see "
            "configs/model/representation/ and configs/featurizer/)"
        )
    cfg.task = task
    return OmegaConf.select(cfg, chosen)


def _frame(data: TaskData, mol_ids: np.ndarray) -> pd.DataFrame:
    rows = data.table.rows_of(mol_ids)
    return pd.DataFrame(
        {
            "mol_id": data.table.mol_id[rows],
            "smiles": data.table.smiles[rows],
            "target": data.y[rows],
        }
    )


def _card(
    data: TaskData, split: SplitAssignment, frames: dict[str, pd.DataFrame], cfg: DictConfig
) -> dict[str, Any]:
    train_y = frames["train"]["target"]
    median = float(np.median(train_y))
    ood = frames["ood"]["target"]
    low, high = ood[ood < median], ood[ood >= median]
    return {
        "task": data.task.name,
        "property": data.task.property,
        "units": data.task.units,
        "extensive": data.task.extensive,
        "split": cfg.split.name,
        "split_hash": split.hash,
        "sizes": {name: len(frame) for name, frame in frames.items()},
        "train_range": [float(train_y.min()), float(train_y.max())],
        "train_median": median,
        # the OOD set's tails: values up to `low` and from `high` on (None: no such tail)
        "ood_thresholds": {
            "low": float(low.max()) if len(low) else None,
            "high": float(high.min()) if len(high) else None,
        },
        "data_version": data.table.version,
        "source": data.task.source.fingerprint(Path(cfg.paths.data_dir)),
        "validation": data.report.summary_line(),
    }
