"""Reading a checkpoint that train.py wrote, for everything that rebuilds a model from
one (`oodmol predict`, `evaluate.py ckpt_path=`): a file the user may have received, so
it is read weights-only (no pickled object, so no code, comes back) and the config stored
in it is rebuilt as data (`oodmol.stored_config`). Any file that is not such a checkpoint
(missing, empty, truncated, another program's) is refused in one line."""

from __future__ import annotations

import math
import pickle
import pickletools
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import torch
from omegaconf import DictConfig

from oodmol.data.baseline import LinearBaseline
from oodmol.errors import MissingFileError, UserError
from oodmol.stored_config import check_plain_data, rebuild
from oodmol.training.build import (
    BASELINE_KEY,
    CONFIG_KEY,
    FEATURES_KEY,
    RUN_KEY,
    STATISTICS_KEY,
)

# what rebuilding a model and its data needs of the stored run config; the rest of it
# (loggers, callbacks, paths, Hydra's own settings) is never read
INFERENCE_KEYS = (
    "task",
    "split",
    "model",
    "uq",
    "protocol",
    "trainer",
    "seed",
    "eval_batch_size",
    "max_molecules",
    "matmul_precision",
    "baseline",
)


ZIP_MAGIC = b"PK\x03\x04"  # torch.save's format since torch 1.6
PICKLE_PROTOCOL = b"\x80"  # the legacy format: a pickle
# a train.py checkpoint's pickled part (names, settings, the tokenizer's text; tensors
# apart) takes a few thousand pickle operations; weights-only loading runs each in
# Python, so a planted structure of millions would keep a reader busy for minutes
MAX_PICKLE_OPERATIONS = 250_000


class CheckpointError(UserError):
    """A file that is not a checkpoint this project's train.py wrote."""


@dataclass(frozen=True)
class TrainedModel:
    """What a checkpoint holds besides its weights: the run's config (checked, rebuilt),
    the training statistics the model was built from, what the feature set learnt from
    the training split, the run's entry (configuration key, identity, budget), and
    Δ-learning's fitted baseline (None without one)."""

    path: Path
    config: DictConfig
    statistics: dict[str, Any]
    features: dict[str, Any]
    run_entry: dict[str, Any]
    baseline: dict[str, Any] | None = None

    def restore_baseline(self, baseline: LinearBaseline | None) -> None:
        """Put the checkpoint's Δ-learning fit into the baseline its config builds: the
        line the model learnt the residual of, never one fitted anew."""
        if self.baseline is None:
            return
        if baseline is None:
            raise CheckpointError(
                f"ckpt_path={self.path} holds a baseline's fit but its config names none"
            )
        try:
            baseline.restore(self.baseline["intercept"], self.baseline["slopes"])
        except ValueError as error:
            raise CheckpointError(f"ckpt_path={self.path}: its baseline holds {error}") from None


def read_checkpoint_file(path: str | Path, mmap: bool = False) -> dict[str, Any]:
    """A checkpoint file's content, weights-only; any file that cannot be read as one
    raises `CheckpointError` saying what it is."""
    path = Path(path)
    if not path.exists():
        raise MissingFileError(f"ckpt_path={path}: no such file")
    if not path.is_file():
        raise CheckpointError(f"ckpt_path={path} is a folder, not a checkpoint file")
    if path.stat().st_size == 0:
        raise CheckpointError(f"ckpt_path={path} is empty (0 bytes): not a checkpoint")
    with open(path, "rb") as handle:
        start = handle.read(4)
    if start[:4] != ZIP_MAGIC and start[:1] != PICKLE_PROTOCOL:
        raise CheckpointError(
            f"ckpt_path={path} cannot be read as a checkpoint (it does not start like one: "
            "a text file, or another kind of file?)"
        )
    _check_pickle_size(path, start[:4] == ZIP_MAGIC)
    try:
        content = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise CheckpointError(
            f"ckpt_path={path} holds objects that only code can rebuild, which oodmol never "
            f"loads ({first[:160]})"
        ) from None
    except Exception as error:  # torch's reader of a damaged file raises many kinds
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise CheckpointError(
            f"ckpt_path={path} cannot be read as a checkpoint (truncated, damaged or another "
            f"kind of file: {type(error).__name__}: {first[:160]})"
        ) from None
    if not isinstance(content, dict):
        raise CheckpointError(
            f"ckpt_path={path} holds a {type(content).__name__}, not a checkpoint"
        )
    return content


def _check_pickle_size(path: Path, zipped: bool) -> None:
    """Refuse a checkpoint whose pickled part holds more operations than any train.py
    writes, counted (and stopped at the limit) before anything is unpickled."""
    try:
        if zipped:
            with zipfile.ZipFile(path) as archive:
                names = [n for n in archive.namelist() if n.endswith("/data.pkl")]
                if not names:
                    return  # not torch's layout: torch's reader says so
                with archive.open(names[0]) as pickled:
                    _count_operations(path, pickled, pickles=1)
        else:
            with open(path, "rb") as pickled:  # magic, protocol, system info, content
                _count_operations(path, pickled, pickles=4)
    except (zipfile.BadZipFile, ValueError, EOFError):
        return  # damaged: torch's reader names what is wrong


def _count_operations(path: Path, stream: IO[bytes], pickles: int) -> None:
    count = 0
    for _ in range(pickles):
        for _ in pickletools.genops(stream):
            count += 1
            if count > MAX_PICKLE_OPERATIONS:
                raise CheckpointError(
                    f"ckpt_path={path} holds more than {MAX_PICKLE_OPERATIONS:,} pickled "
                    "values, far more than any checkpoint train.py writes; not read"
                )


def read_trained_model(path: str | Path) -> tuple[TrainedModel, dict[str, Any]]:
    """The model description a train.py checkpoint holds, and the raw content (its
    weights), or a one-line refusal."""
    path = Path(path)
    content = read_checkpoint_file(path)
    missing = [k for k in (CONFIG_KEY, STATISTICS_KEY, FEATURES_KEY) if k not in content]
    if missing:
        raise CheckpointError(
            f"ckpt_path={path} lacks {', '.join(missing)}: not a checkpoint written by "
            "oodmol's train.py (or by an older version of it)"
        )
    source = f"ckpt_path={path}"
    config = rebuild(content[CONFIG_KEY], source, keep=INFERENCE_KEYS)
    check_plain_data(content[STATISTICS_KEY], source)
    check_plain_data(content[FEATURES_KEY], source)
    baseline = content.get(BASELINE_KEY)
    if baseline is not None:
        check_plain_data(baseline, source)
        slopes = baseline.get("slopes")
        numbers = [baseline.get("intercept"), *(slopes if isinstance(slopes, list) else [None])]
        if not all(isinstance(v, float) and math.isfinite(v) for v in numbers):
            raise CheckpointError(
                f"ckpt_path={path}: its baseline's fit is not an intercept and a list of "
                "slopes, all finite numbers (a checkpoint of an older oodmol: train it again)"
            )
    for key in ("task", "model"):
        if not isinstance(config.get(key), DictConfig):
            raise CheckpointError(f"ckpt_path={path}: its stored config has no {key}")
    trained = TrainedModel(
        path,
        config,
        content[STATISTICS_KEY],
        content[FEATURES_KEY],
        content.get(RUN_KEY) or {},
        baseline,
    )
    return trained, content
