"""A run folder belongs to one run. Before any work, `plan_run` reads what a folder holds
and decides: train, resume, report that the run is already done, or refuse.

| the folder holds                         | this configuration           | another one |
|------------------------------------------|------------------------------|-------------|
| nothing (or an attempt that saved none)  | train                        | train       |
| a finished run (metrics.json, complete)  | done: its metrics            | refuse      |
| a failed run (metrics.json, failed)      | refuse, with its failure     | refuse      |
| a run failed on a full disk (resumable)  | resume if asked, else refuse | refuse      |
| an interrupted run (last.ckpt)           | resume if asked, else refuse | refuse      |

"Asked" is `resume=true`, or a job that SLURM requeued (`SLURM_RESTART_COUNT` > 0). A
failure is resumable where it says so (`"resumable": true`: the disk or the quota was
full, which freeing space fixes, and the last good checkpoint is intact); a diverged
training is not, it would diverge again. A resumable failure goes on from `last.ckpt`,
or starts over where none was saved.

While a process trains into a folder, it holds the folder's lock (`LOCK_FILE`, see
`oodmol.locks.FolderLock`), and another process is refused at once.

`ckpt_path=<file>` resumes from that file whatever the folder holds, if the checkpoint
was written by the same task, data, split, model, seed, uq method and subset.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from omegaconf import DictConfig

from oodmol.errors import UserError
from oodmol.identity import (
    config_key,
    describe,
    identity_differences,
    run_identity,
)
from oodmol.run_record import METRICS_FILE, RecordError, RunRecord, read_record
from oodmol.training.build import RUN_KEY

CHECKPOINT_DIR = "checkpoints"
LAST_CHECKPOINT = "last.ckpt"
LOCK_FILE = ".lock"
# how torch.save's files start: its zip format (since torch 1.6), its legacy pickle
_TORCH_FORMATS = (b"PK\x03\x04", b"\x80")


class RunFolderError(UserError, RuntimeError):
    """The run cannot start here; the message says why and what to do."""


@dataclass(frozen=True)
class Plan:
    action: Literal["train", "resume", "done"]
    checkpoint: Path | None = None
    resume_step: int | None = None  # the global step training goes on from
    metrics: dict | None = None  # of a run that is already done
    message: str = ""


def last_checkpoint(folder: Path) -> Path:
    return Path(folder) / CHECKPOINT_DIR / LAST_CHECKPOINT


def plan_run(folder: str | Path, cfg: DictConfig) -> Plan:
    folder = Path(folder)
    key = config_key(cfg)
    identity = run_identity(cfg)
    if (folder / METRICS_FILE).is_file():
        record = _read_record(folder)
        if record.config_key != key:
            raise RunFolderError(_other_run(folder, "a run", record.config_key, key))
        if record.seed is not None:  # the record of a run says whose it is
            _check_same_seed(folder, record.seed, record.member, cfg)
        metrics, status = record.to_json(), record.status
        if status == "complete":
            summary = ", ".join(
                f"{name.upper()} RMSE {metrics[name]['rmse']:.4g}"
                for name in ("id", "ood")
                if isinstance(metrics.get(name), dict) and metrics[name].get("rmse") is not None
            )
            return Plan(
                "done",
                metrics=metrics,
                message=f"[oodmol] {folder} already holds this run, complete ({summary}): "
                "nothing to do. Delete the folder to train it again.",
            )
        failure = metrics.get("failure") or {}
        reason = failure.get("message", "no reason recorded")
        if not failure.get("resumable"):
            raise RunFolderError(
                f"{folder} holds a {status} attempt of this run ({reason}); delete the "
                "folder to try again"
            )
        if not asked_to_resume(cfg):
            raise RunFolderError(
                f"{folder} holds an attempt of this run that failed but can go on "
                f"({reason}); once that is fixed, continue it with resume=true, or delete "
                "the folder to start over"
            )
    if cfg.get("ckpt_path"):
        checkpoint = Path(cfg.ckpt_path)
        saved = read_run_entry(checkpoint, "give another checkpoint, or leave ckpt_path out")
        check_same_run(checkpoint, saved["identity"], identity)
        return Plan("resume", checkpoint, saved["global_step"])
    last = last_checkpoint(folder)
    if not last.is_file():
        return Plan("train")
    saved = read_run_entry(last, "this run cannot go on from it: delete that file to start over")
    if saved["config_key"] != key:
        raise RunFolderError(_other_run(folder, "an interrupted run", saved["config_key"], key))
    theirs = saved.get("identity") or {}
    if "seed" in theirs:
        _check_same_seed(folder, theirs["seed"], (theirs.get("uq") or {}).get("member"), cfg)
    if asked_to_resume(cfg):
        return Plan("resume", last, saved["global_step"])
    raise RunFolderError(
        f"{folder} holds an interrupted run of this configuration ({last.name}: epoch "
        f"{saved['epoch']}, step {saved['global_step']}); continue it with resume=true, "
        "or delete the folder to start over"
    )


def asked_to_resume(cfg: DictConfig) -> bool:
    """`resume=true`, or a job SLURM requeued: a run that may go on from where it stopped."""
    return bool(cfg.get("resume")) or requeued_by_slurm()


def requeued_by_slurm() -> bool:
    """SLURM counts a job's restarts; a requeued job goes on from its last checkpoint."""
    return int(os.environ.get("SLURM_RESTART_COUNT") or 0) > 0


def read_run_entry(checkpoint: Path, remedy: str = "delete it to start over") -> dict[str, Any]:
    """The run entry of a checkpoint written by train.py, with its epoch and step; a file
    that is not one is refused saying what it is, then what to do (`remedy`)."""
    if not checkpoint.is_file():
        raise RunFolderError(f"ckpt_path={checkpoint}: no such file")
    with open(checkpoint, "rb") as handle:
        start = handle.read(4)
    if not start:
        raise RunFolderError(f"{checkpoint} is empty (0 bytes), not a checkpoint; {remedy}")
    if not start.startswith(_TORCH_FORMATS):
        link = f" (a link to {checkpoint.resolve()})" if checkpoint.is_symlink() else ""
        raise RunFolderError(
            f"{checkpoint}{link} cannot be read as a checkpoint: it does not start like one "
            f"(a text file, or another kind of file?); {remedy}"
        )
    try:  # only torch's zip format maps; the legacy pickle format is read whole
        saved = torch.load(
            checkpoint, map_location="cpu", weights_only=True, mmap=start == _TORCH_FORMATS[0]
        )
    except Exception as error:  # truncated, damaged, or holding code
        raise RunFolderError(
            f"{checkpoint} cannot be read as a checkpoint ({type(error).__name__}: "
            f"{str(error).splitlines()[0] if str(error) else ''}); {remedy}"
        ) from error
    if not isinstance(saved, dict) or RUN_KEY not in saved:
        raise RunFolderError(f"{checkpoint} was not written by train.py (no {RUN_KEY!r} entry)")
    return {**saved[RUN_KEY], "epoch": saved.get("epoch"), "global_step": saved["global_step"]}


def check_same_run(checkpoint: Path, theirs: dict, ours: dict) -> None:
    """Refuse a checkpoint of another task, data set, split, model, seed, uq or subset."""
    differences = identity_differences(ours, theirs)
    if differences:
        raise RunFolderError(
            f"{checkpoint} was written by a run of {describe(theirs)}; this run is "
            f"{describe(ours)} (they differ in {', '.join(differences)}): refusing to "
            "resume from it"
        )


def _read_record(folder: Path) -> RunRecord:
    try:
        return read_record(folder)
    except RecordError as error:
        raise RunFolderError(f"{error}; delete the folder {folder} to run again") from None


def _check_same_seed(folder: Path, seed: Any, member: Any, cfg: DictConfig) -> None:
    """The configuration key leaves the seed and the ensemble member out (they are
    folders below it), so a folder named by hand must be checked for them too: seed 3
    pointed at seed 0's folder must not be reported as done with seed 0's results."""
    ours = (cfg.get("seed"), (cfg.get("uq") or {}).get("member"))
    if (seed, member) != ours:
        raise RunFolderError(
            f"{folder} holds the run of {_seed_text(seed, member)}; this run is "
            f"{_seed_text(*ours)}: choose another hydra.run.dir (or leave it out for the "
            "default folder)"
        )


def _seed_text(seed: Any, member: Any) -> str:
    return f"seed {seed}" if member is None else f"seed {seed}, member {member}"


def _other_run(folder: Path, what: str, theirs: str | None, ours: str) -> str:
    return (
        f"{folder} holds {what} of another configuration (key {theirs}; this run's key is "
        f"{ours}): refusing to mix them. Choose another hydra.run.dir or delete the folder."
    )
