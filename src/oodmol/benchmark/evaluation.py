"""Scoring an outside model's predictions on a benchmark task, with the code that scores
train.py's runs (`oodmol.scoring.results`): the same metrics, the same uncertainty assessment,
the same result files when saved (then marked as external)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from oodmol.comparability import EXTERNAL
from oodmol.errors import UserError
from oodmol.names import check_name, inside
from oodmol.predictions import SetPredictions, std_columns
from oodmol.run_record import METRICS_FILE, TEST_SETS, RunRecord
from oodmol.scoring.results import scored, write_results
from oodmol.scoring.values import value_problems

MAX_NAMED = 5
Values = np.ndarray | list | pd.Series | pd.DataFrame | Mapping


class ScoredTask(Protocol):
    """What scoring needs of a task: `oodmol.benchmark.BenchmarkTask` has it."""

    name: str
    split: str
    seed: int
    val: pd.DataFrame
    test: dict[str, pd.DataFrame]
    card: dict[str, Any]


class RunExistsError(UserError, FileExistsError):
    """A run folder that already holds a run."""


class SaveToError(UserError, NotADirectoryError):
    """A `save_to` that cannot be a runs folder: a file stands in its place."""


class PredictionError(UserError, ValueError):
    """Predictions that do not fit the task's sets: wrong length, unknown or repeated
    ids, missing molecules or sets, values that are not finite."""


def evaluate(
    task: ScoredTask,
    predictions: Mapping[str, Values] | None = None,
    *,
    sigma: Mapping[str, Values] | None = None,
    val: Values | None = None,
    val_sigma: Values | None = None,
    name: str = "my_model",
    seed: int | None = None,
    save_to: str | Path | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """The metrics of `predictions` ({"id": ..., "ood": ...}) on the task's test sets, as
    a train.py run's metrics.json holds them (RMSE, MAE, R², Spearman; the OOD set's
    binned R²).

    Each set's values are either aligned with `task.test[set]` (an array or a list of
    its length) or keyed by mol_id (a Series indexed by mol_id, or a DataFrame with
    `mol_id` and `y_pred` columns). `sigma` (the same shapes; predictive standard
    deviations) adds the calibration and ranking metrics; with predictions (and σ) of
    `task.val` as well, z-scaled and conformal recalibrations fitted on them.
    `save_to=<runs folder>` writes a run folder `<task>/<split>/<name>/<seed>/`
    (metrics.json, predictions.csv, figures) marked as external, which the leaderboard
    shows beside oodmol's own models.
    """
    if not all(hasattr(task, name) for name in ScoredTask.__annotations__):
        raise PredictionError(
            f"task must be a BenchmarkTask (benchmark.load(...)), not a {type(task).__name__}"
        )
    for what, given in (("predictions", predictions), ("sigma", sigma)):
        if not isinstance(given, Mapping) and (given is not None or what == "predictions"):
            raise PredictionError(
                f"{what} must be a dict of sets, {{'id': ..., 'ood': ...}}, not "
                f"{'None' if given is None else 'a ' + type(given).__name__}"
            )
    runs = None if save_to is None else _runs_folder(save_to)
    unknown = sorted(set(predictions) - set(TEST_SETS))
    missing = [s for s in TEST_SETS if s not in predictions]
    if unknown or missing:
        raise PredictionError(
            f"predictions need exactly the sets {list(TEST_SETS)}; "
            f"missing {missing}, unknown {unknown}"
        )
    frames = dict(task.test)
    values = {s: _aligned(predictions[s], frames[s], s, "prediction") for s in TEST_SETS}
    sigmas = {s: _aligned(sigma[s], frames[s], s, "sigma") for s in TEST_SETS} if sigma else {}
    if val is not None:
        frames["val"] = task.val
        values["val"] = _aligned(val, task.val, "val", "prediction")
        if val_sigma is not None:
            sigmas["val"] = _aligned(val_sigma, task.val, "val", "sigma")
    sets = {
        s: SetPredictions(
            s,
            frames[s]["mol_id"].to_numpy(),
            frames[s]["smiles"].to_numpy(),
            frames[s]["target"].to_numpy(float),
            values[s],
            **std_columns(None, sigmas[s] ** 2 if s in sigmas else None),
        )
        for s in values
    }
    header = _header(task, name, task.seed if seed is None else seed, bool(sigmas))
    median = task.card["train_median"]
    train_range = tuple(task.card["train_range"])
    if runs is None:
        record, _ = scored(sets, RunRecord.of(header), median, train_range=train_range)
        return record.to_json()
    parts = [check_name(v, f"the run's {k}") for k, v in (("task", task.name),
             ("split", task.split), ("name", name), ("seed", str(header["seed"])))]  # fmt: skip
    folder = inside(runs, "/".join(parts), "the run folder")
    if (folder / METRICS_FILE).exists() and not overwrite:
        raise RunExistsError(f"{folder} already holds a run; pass overwrite=True to replace it")
    record, _ = write_results(
        folder,
        sets,
        RunRecord.of(header),
        median,
        task.card["property"],
        task.card["units"],
        train_range=train_range,
    )
    return record.to_json()


def _runs_folder(save_to: str | Path) -> Path:
    """The runs folder results are saved under, refused where a file stands in its
    place or in the place of a folder above it."""
    folder = Path(save_to)
    blocking = next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        where = "is" if blocking == folder else f"is inside {blocking}, which is"
        raise SaveToError(
            f"save_to={str(save_to)!r} {where} a file: save_to names the runs folder the "
            "results are written under (created if missing, e.g. save_to='runs')"
        )
    return folder


def _header(task: ScoredTask, name: str, seed: int, has_sigma: bool) -> dict[str, Any]:
    header = {
        "task": task.name,
        "split": task.split,
        "model": name,
        "seed": seed,
        "split_hash": task.card["split_hash"],
        "status": "complete",
        "flags": [EXTERNAL],
        "config_key": None,
        "n_params": None,
        "train_seconds": None,
        "property": task.card["property"],
        "units": task.card["units"],
        "data": {"sizes": task.card["sizes"]},
        "source": "oodmol.benchmark",
    }
    if has_sigma:
        header["uq"] = {"method": "native", "member": None}  # the model's own σ
    return header


def _aligned(values: Values, frame: pd.DataFrame, set_name: str, what: str) -> np.ndarray:
    """The values in the order of `frame`'s molecules, or an error naming what is wrong."""
    if isinstance(values, Mapping) and not isinstance(values, pd.Series | pd.DataFrame):
        values = pd.Series(dict(values))  # keyed by mol_id
    if isinstance(values, pd.DataFrame):
        column = "y_pred" if what == "prediction" else "y_std"
        if "mol_id" not in values or column not in values:
            raise PredictionError(
                f"{set_name}: a DataFrame of {what}s needs columns 'mol_id' and {column!r}; "
                f"it has {list(values.columns)}"
            )
        values = values.set_index("mol_id")[column]
    if isinstance(values, pd.Series):
        array = _by_mol_id(values, frame, set_name, what)
    else:
        array = _numbers(values, set_name, what)
        if len(array) != len(frame):
            raise PredictionError(
                f"{set_name}: {len(array)} {what}s for the set's {len(frame)} molecules "
                "(give them in the order of the set, or as a Series indexed by mol_id)"
            )
    problems = value_problems(array, what)
    for problem in dict.fromkeys(p for p in problems if p):
        bad = problems == problem
        ids = frame["mol_id"].to_numpy()[bad]
        raise PredictionError(f"{set_name}: {int(bad.sum())} {what}s are {problem}: {_named(ids)}")
    return array


def _numbers(values: object, set_name: str, what: str) -> np.ndarray:
    """An array-like of numbers as a flat float array, or one error saying what it is."""
    if values is None or isinstance(values, str | bytes) or np.isscalar(values):
        raise PredictionError(
            f"{set_name}: {what}s must be an array or list of numbers (or a Series or dict "
            f"keyed by mol_id), not a {type(values).__name__}"
        )
    try:
        array = np.asarray(values, dtype=float)
    except (TypeError, ValueError) as error:
        raise PredictionError(f"{set_name}: {what}s must be numbers ({error})") from None
    if array.ndim != 1 and not (array.ndim == 2 and 1 in array.shape):
        raise PredictionError(
            f"{set_name}: {what}s must be one value per molecule; got an array of shape "
            f"{array.shape}"
        )
    return array.ravel()


def _by_mol_id(values: pd.Series, frame: pd.DataFrame, set_name: str, what: str) -> np.ndarray:
    ids = pd.Index(values.index)
    if not all(isinstance(i, int | np.integer) and not isinstance(i, bool) for i in ids):
        odd = [i for i in ids if not isinstance(i, int | np.integer) or isinstance(i, bool)]
        raise PredictionError(
            f"{set_name}: {what}s keyed by mol_id need whole-number mol_ids; got "
            f"{', '.join(repr(i) for i in odd[:MAX_NAMED])}"
        )
    repeated = ids[ids.duplicated()].unique()
    if len(repeated):
        raise PredictionError(
            f"{set_name}: {len(repeated)} mol_ids have more than one {what}: {_named(repeated)}"
        )
    expected = pd.Index(frame["mol_id"])
    unknown, missing = ids.difference(expected), expected.difference(ids)
    hint = _index_hint(values, set_name) if len(unknown) or len(missing) else ""
    if len(unknown):
        raise PredictionError(
            f"{set_name}: {len(unknown)} mol_ids are not molecules of the set: "
            f"{_named(unknown)}{hint}"
        )
    if len(missing):
        raise PredictionError(
            f"{set_name}: {len(missing)} molecules of the set have no {what}: "
            f"{_named(missing)}{hint}"
        )
    return _numbers(values.loc[expected].to_numpy(), set_name, what)


def _index_hint(values: pd.Series, set_name: str) -> str:
    """What to do with a Series that kept pandas' default index (0, 1, 2, ...), which is
    read as mol_ids like any other index."""
    if not isinstance(values.index, pd.RangeIndex) or values.index.start != 0:
        return ""
    return (
        f" (a Series is read by its index as mol_ids, and this one has pandas' default "
        f"index 0..{len(values) - 1}: index it by mol_id, "
        f"pd.Series(values, index=task.test[{set_name!r}]['mol_id']), or pass "
        "values.to_numpy() in the order of the set)"
    )


def _named(ids) -> str:
    shown = ", ".join(f"mol {i}" for i in list(ids)[:MAX_NAMED])
    more = f" and {len(ids) - MAX_NAMED} more" if len(ids) > MAX_NAMED else ""
    return shown + more
