"""A task: one property of one data set, with its units and nature, and its split."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from oodmol.data.dataset import load_dataset, print_once
from oodmol.data.sources.base import Source
from oodmol.data.sources.csv_source import CSVSource
from oodmol.data.splits.assignment import SplitAssignment
from oodmol.data.splits.splitters import Splitter
from oodmol.data.table import MoleculeTable
from oodmol.data.validation_report import DataReport
from oodmol.errors import InputError
from oodmol.io import file_digest
from oodmol.locks import build_lock
from oodmol.names import check_name, inside, safe_stem

log = logging.getLogger(__name__)


@dataclass
class Task:
    """Built by Hydra from configs/task/<name>.yaml; adding a task needs no Python.

    `extensive` properties grow with molecule size (sum readout), intensive ones do not
    (mean readout). `ood_size` is the OOD set's size: a count, or a fraction below 1.
    """

    name: str
    source: Source
    target: str
    property: str
    units: str
    extensive: bool
    description: str
    ood_size: int | float
    benchmark: str | None = None  # a label: the benchmark whose grids list the task
    # the column of the physics featuriser (configs/featurizer/physics.yaml) that
    # estimates the property: a physics baseline's and Δ-learning's input
    physics_estimate: str | None = None
    # the ALPB solvents the physics estimates compute (None: all); QM9's need none
    physics_solvents: list[str] | None = None

    def __post_init__(self) -> None:
        check_name(self.name, "task.name")

    def label(self) -> str:
        return f"{self.property} ({self.units})"


def csv_task(
    path: str,
    target_column: str,
    smiles_column: str = "smiles",
    units: str = "",
    extensive: bool = False,
    ood_size: int | float = 0.1,
    description: str = "",
    name: str | None = None,
    checksum: str | None = None,
    columns: list[str] | None = None,
    limits: dict | None = None,
    physics_estimate: str | None = None,
) -> Task:
    """A BOOM-style task on a user's own CSV file, through the same validation.

    `checksum` (`sha256:<hex>`, configs/task/csv.yaml fills it in) is the content the
    run's configuration, and so its folder, was made for: a file changed since is refused.
    `columns` reads more property columns into the data set (default: the target alone),
    for a split ranked by another column (`split=ood_of split.property=<column>`).
    `limits` bounds each molecule's size and parsing time (`MoleculeLimits`' keys).
    `physics_estimate` names the physics featuriser's column that estimates the property
    (for `baseline=physics`).
    """
    if checksum is not None:
        actual = f"sha256:{file_digest(Path(path).expanduser(), 'sha256')}"
        if actual != checksum:
            raise ValueError(
                f"task.path={path} changed since this run was configured "
                f"({checksum} then, {actual} now); start the run again"
            )
    stem = safe_stem(Path(path).stem)
    source = CSVSource(
        name=f"csv-{stem}",
        files=[path],
        smiles_column=smiles_column,
        target_columns=list(columns or [target_column]),
        limits=limits,
    )
    return Task(
        name=name or f"csv-{stem}-{target_column}",
        source=source,
        target=target_column,
        property=target_column,
        units=units,
        extensive=extensive,
        description=description or f"{target_column} from {path}",
        ood_size=ood_size,
        physics_estimate=physics_estimate,
    )


@dataclass
class TaskData:
    """The molecules of a task (one target column), their data set and the report."""

    task: Task
    table: MoleculeTable
    dataset: MoleculeTable
    report: DataReport

    @property
    def y(self) -> np.ndarray:
        return self.table.targets[self.task.target]


def load_task(task: Task, data_dir: Path, progress: bool = True) -> TaskData:
    """The task's molecules: the validated data set less those without a finite target."""
    dataset, dataset_report = load_dataset(task.source, data_dir, progress)
    if task.target not in dataset.targets:
        raise KeyError(
            f"task {task.name!r}: target {task.target!r} is not a column of data set "
            f"{dataset.name!r} (columns: {sorted(dataset.targets)})"
        )
    y = dataset.targets[task.target]
    report = DataReport.from_dict(dataset_report.to_dict())
    report.source = f"{dataset.name}/{task.name}"
    for row in np.flatnonzero(~np.isfinite(y)):
        report.record(
            f"non-finite {task.target}",
            "dropped",
            f"mol {dataset.mol_id[row]}",
            repr(float(y[row])),
        )
    keep = np.flatnonzero(np.isfinite(y))
    if len(keep) == 0:
        raise InputError(
            f"task {task.name!r}: no molecule of data set {dataset.name!r} has a finite "
            f"{task.target!r} value ({report.summary_line()})"
        )
    table = dataset.take(keep)
    table = MoleculeTable(
        name=dataset.name,
        mol_id=table.mol_id,
        smiles=table.smiles,
        targets={task.target: table.targets[task.target]},
        geometry=table.geometry,
    )
    report.n_kept = len(table)
    if len(keep) < len(y):
        print_once(f"{data_dir}/{task.name}/{table.version}", report.summary_line())
    return TaskData(task, table, dataset, report)


def split_path(data: TaskData, splitter: Splitter, data_dir: Path) -> Path:
    identity = {"table": data.table.version, "target": data.task.target, **splitter.settings()}
    key = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:12]
    return inside(data_dir, f"splits/{data.task.name}/{splitter.name}-{key}.json", "split file")


def load_split(data: TaskData, splitter: Splitter, data_dir: Path) -> SplitAssignment:
    """The task's persisted split, computed and written once (under a lock) if absent.

    Keyed by the task table's content and the split settings, so every model reads the
    same file; a damaged file is recomputed, never trusted. A good file is read without
    a lock or any write (it may sit on a read-only disk).
    """
    path = split_path(data, splitter, data_dir)
    split, problem = _read_split(path)
    if split is not None:
        return split
    with build_lock(Path(f"{path}.lock"), f"split file {path} {problem or 'is missing'}"):
        split, problem = _read_split(path)  # another process may have written it meanwhile
        if split is not None:
            return split
        if problem is not None:
            log.warning("split file %s %s; recomputing it", path, problem)
        split = splitter.split(
            _with_columns(data, splitter.columns(data.task.target)), data.task.target
        )
        split.check_no_leakage(data.table)
        split.info.update({"task": data.task.name, "table_version": data.table.version})
        split.write(path)
    return split


def _with_columns(data: TaskData, columns: tuple[str, ...]) -> MoleculeTable:
    """The task's molecules with the data set's `columns` a splitter reads beside the
    target (every one finite for every molecule of the task)."""
    missing = [c for c in columns if c not in data.dataset.targets]
    if missing:
        raise KeyError(
            f"split of task {data.task.name!r} reads {missing}, not columns of data set "
            f"{data.dataset.name!r} (columns: {sorted(data.dataset.targets)})"
        )
    rows = data.dataset.rows_of(data.table.mol_id)
    targets = {c: data.dataset.targets[c][rows] for c in columns}
    for column, values in targets.items():
        if not np.isfinite(values).all():
            raise ValueError(
                f"split of task {data.task.name!r}: column {column!r} is not finite for "
                f"{int((~np.isfinite(values)).sum())} of the task's molecules"
            )
    table = data.table
    return MoleculeTable(
        table.name, table.mol_id, table.smiles, {**table.targets, **targets}, version=table.version
    )


def _read_split(path: Path) -> tuple[SplitAssignment | None, str | None]:
    """The split in `path`, or None and what is wrong with the file (None when absent)."""
    if not path.exists():
        return None, None
    try:
        return SplitAssignment.read(path), None
    except Exception as error:  # any damage means: recompute, never a wrong split
        return None, f"is unusable ({error!r})"
