"""The record of a run: what its `metrics.json` holds, with one writer and one reader.

Every producer of results (train.py's test, a failed or searched run, a re-scored
checkpoint, external predictions, the Python API, a combined ensemble) builds a
`RunRecord` and writes it with `RunRecord.write`; every consumer (the run folder's plan,
the leaderboard, ablations, sweeps, ensembles, reproduction) reads records with
`read_record` or `iter_runs`. The file stays flat JSON (nested keys are the sections a
leaderboard flattens), now with a schema version; files written before it (no `schema`)
are read as version 1, which has the same keys.

One rule decides what an ensemble member is: a record whose `uq.member` is set. A member's
own files are part of its ensemble's run, never a run of their own.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from oodmol.bounded import read_json
from oodmol.errors import InputError
from oodmol.io import atomic_write_text

METRICS_FILE = "metrics.json"
SCHEMA = 2
STATUSES = ("complete", "failed")
TEST_SETS = ("id", "ood")
# the metrics every complete run records: set -> metric names (null = not defined)
REQUIRED_METRICS = {"id": ("rmse", "r2"), "ood": ("rmse", "binned_r2")}
ERRORS = ("rmse", "mae")  # finite and never negative; a null RMSE is no result
Kind = Literal["runs", "members", "all"]


class RecordError(InputError):
    """A metrics.json that is not the record of a run: unreadable, or missing or holding
    impossible values where a run's record has them."""


@dataclass
class RunRecord:
    """One run's record. `sections` keeps every other section a producer wrote
    (uncertainty metrics, the objective of a search trial, a failure, a fine-tuning's
    source, an external file's coverage ...), so that reading and writing a record
    loses nothing."""

    task: str
    split: str
    model: str
    seed: int | None
    status: str = "complete"
    config_key: str | None = None
    split_hash: str | None = None
    uq: dict[str, Any] = field(default_factory=lambda: {"method": "none", "member": None})
    flags: list[str] = field(default_factory=list)
    identity: dict[str, Any] | None = None  # task, data, split, model, seed, uq, subset
    data: dict[str, Any] = field(default_factory=dict)
    training: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)  # id, ood, val
    versions: dict[str, Any] = field(default_factory=dict)
    sections: dict[str, Any] = field(default_factory=dict)
    schema: int = SCHEMA
    path: Path | None = field(default=None, compare=False)  # where it was read from

    @property
    def member(self) -> int | None:
        """The ensemble member this record is of (None: a run of its own)."""
        return self.uq.get("member") if isinstance(self.uq, dict) else None

    @property
    def is_member(self) -> bool:
        return self.member is not None

    @property
    def complete(self) -> bool:
        return self.status == "complete"

    @property
    def tested(self) -> bool:
        """Whether it holds test metrics (a search trial records its objective only)."""
        return all(s in self.metrics for s in TEST_SETS)

    @property
    def folder(self) -> Path | None:
        return None if self.path is None else self.path.parent

    def get(self, name: str, default: Any = None) -> Any:
        """A section by its name in the file (`record.get("failure")`)."""
        return self.to_json().get(name, default)

    def with_sections(self, **sections: Any) -> RunRecord:
        return replace(self, sections={**self.sections, **sections})

    def to_json(self) -> dict[str, Any]:
        """The file's content: flat sections, NaN written as null (JSON has no NaN)."""
        out: dict[str, Any] = {
            "schema": self.schema,
            "task": self.task,
            "split": self.split,
            "model": self.model,
            "seed": self.seed,
            "status": self.status,
            "config_key": self.config_key,
            "split_hash": self.split_hash,
            "uq": self.uq,
            "flags": list(self.flags),
        }
        if self.identity is not None:
            out["identity"] = self.identity
        out |= {"data": self.data, "training": self.training}
        out |= self.sections
        out |= self.metrics
        out["versions"] = self.versions
        return _plain(out)

    def write(self, folder: str | Path) -> Path:
        """Write the record into `folder` (atomically: a reader sees the old record or the
        new one, never half of one); its path."""
        path = Path(folder) / METRICS_FILE
        atomic_write_text(path, json.dumps(self.to_json(), indent=2))
        return path

    @classmethod
    def from_json(cls, content: Any, where: str = "metrics.json") -> RunRecord:
        """A record from a parsed file, checked; `RecordError` says what is wrong."""
        record = cls.of(content, where)
        if record.complete and "objective" not in record.sections:  # a trial has no test
            _check_test_metrics(record.metrics, where)
        return record

    @classmethod
    def of(cls, content: Any, where: str = "a run record") -> RunRecord:
        """A record from flat sections as metrics.json holds them (a producer's header,
        or a parsed file): the identity checked, every other section kept."""
        if not isinstance(content, Mapping):
            raise RecordError(f"{where}: the top level is a {type(content).__name__}, not a record")
        rest = dict(content)
        schema = rest.pop("schema", 1)
        if schema not in (1, SCHEMA):
            raise RecordError(f"{where}: schema {schema!r}, which this version cannot read")
        core = {}
        for name in ("task", "split", "model"):
            value = rest.pop(name, None)
            if not isinstance(value, str) or not value:
                raise RecordError(f"{where}: '{name}' missing or not a non-empty string")
            core[name] = value
        seed = rest.pop("seed", None)
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise RecordError(f"{where}: 'seed' is not a whole number: {seed!r}")
        status = rest.pop("status", "complete")
        if status not in STATUSES:
            raise RecordError(f"{where}: 'status' is {status!r}, not one of {STATUSES}")
        uq = rest.pop("uq", None) or {"method": "none", "member": None}
        if not isinstance(uq, dict):
            raise RecordError(f"{where}: 'uq' is not an object")
        record = cls(
            **core,
            seed=seed,
            status=status,
            config_key=rest.pop("config_key", None),
            split_hash=rest.pop("split_hash", None),
            uq=uq,
            flags=list(rest.pop("flags", None) or []),
            identity=rest.pop("identity", None),
            data=rest.pop("data", None) or {},
            training=rest.pop("training", None) or {},
            metrics={s: rest.pop(s) for s in ("id", "ood", "val") if s in rest},
            versions=rest.pop("versions", None) or {},
            schema=SCHEMA,
        )
        record.sections = rest
        return record


def _check_test_metrics(metrics: dict, where: str) -> None:
    for section, names in REQUIRED_METRICS.items():
        values = metrics.get(section)
        if not isinstance(values, dict):
            raise RecordError(f"{where}: '{section}' missing or not an object")
        for name in names:
            if name not in values:
                raise RecordError(f"{where}: '{section}.{name}' missing")
            value = values[name]
            if value is not None and (
                not isinstance(value, int | float) or isinstance(value, bool)
            ):
                raise RecordError(f"{where}: '{section}.{name}' is not a number: {value!r}")
            if value is not None and not math.isfinite(value):
                raise RecordError(f"{where}: '{section}.{name}' is not finite: {value!r}")
        for name in ERRORS:
            if name not in values:
                continue
            value = values[name]
            if not (isinstance(value, int | float) and not isinstance(value, bool) and value >= 0):
                raise RecordError(f"{where}: '{section}.{name}' must be an error ≥ 0: {value!r}")
            if not math.isfinite(value):
                raise RecordError(f"{where}: '{section}.{name}' is not finite: {value!r}")


def read_record(path: str | Path) -> RunRecord:
    """The record in a metrics.json file (or in the run folder `path`)."""
    path = Path(path)
    if path.is_dir():
        path = path / METRICS_FILE
    try:
        content = read_json(path, "run record")
    except FileNotFoundError:
        raise RecordError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise RecordError(f"{path}: unreadable ({error})") from None
    record = RunRecord.from_json(content, str(path))
    record.path = path
    return record


def iter_runs(
    folder: str | Path,
    *,
    kind: Kind = "runs",
    complete: bool = True,
    skipped: list[tuple[Path, str]] | None = None,
) -> Iterator[RunRecord]:
    """The records below `folder` (recursively, in sorted path order): runs of their own
    (`kind="runs"`), ensemble members only ("members") or both ("all"); complete ones
    only unless `complete=False`. A file that is not a record, or one left out for its
    status, is appended to `skipped` with the reason when a list is given."""
    for path in _record_files(Path(folder)):
        try:
            record = read_record(path)
        except RecordError as error:
            if skipped is not None:
                skipped.append((path, str(error).removeprefix(f"{path}: ")))
            continue
        if (kind == "runs" and record.is_member) or (kind == "members" and not record.is_member):
            continue
        if complete and not record.complete:
            if skipped is not None:
                failure = (record.get("failure") or {}).get("message")
                reason = f"a {record.status} run" + (f": {failure}" if failure else "")
                skipped.append((path, reason))
            continue
        yield record


def _record_files(folder: Path) -> list[Path]:
    """Every record file below `folder` in sorted path order, through links to folders too
    (a leaderboard's folder of links to runs kept elsewhere): each real folder is read
    once, by the first path that reaches it, and a link back up ends there."""
    found, seen = [], set()
    for top, folders, files in os.walk(folder, followlinks=True):
        real = os.path.realpath(top)
        if real in seen:
            folders.clear()
            continue
        seen.add(real)
        folders.sort()
        if METRICS_FILE in files:
            found.append(Path(top) / METRICS_FILE)
    return sorted(found)


def _plain(obj: object) -> object:
    """JSON-ready: numpy scalars to Python, NaN and ±inf to null."""
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
