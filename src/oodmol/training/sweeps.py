"""The end of a multirun: how many jobs completed, and each one that did not, with its
reason and where to look.

Hydra's basic sweeper raises the first failed job's error once a batch of jobs has run,
before any `on_multirun_end`, and the process then exits. So `SweepSummary` registers its
report with `atexit` when the multirun starts: it is printed once, at the end, whether
the sweep succeeded or raised, whatever the launcher (local, joblib, submitit, SLURM).
A job's outcome is read from its folder (its `metrics.json`, written by the job itself
wherever it ran), so jobs that ran on other machines are reported too.
"""

from __future__ import annotations

import atexit
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from oodmol.locks import holder_of
from oodmol.run_record import RecordError, read_record
from oodmol.training.run_folder import LOCK_FILE, last_checkpoint

SUBMITIT_DIR = ".submitit"


@dataclass(frozen=True)
class JobOutcome:
    """How one job of a sweep ended, as its run folder tells."""

    folder: Path
    overrides: list[str]
    status: str  # complete | failed | running | interrupted | no result
    reason: str = ""
    log: Path | None = None  # submitit's error log of the job, when it has one


class SweepSummary(Callback):
    """Configured in configs/hydra/default.yaml; prints `summary(sweep dir)` at exit."""

    def __init__(self) -> None:
        self.sweep_dir: Path | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.sweep_dir = Path(config.hydra.sweep.dir)
        atexit.register(self.report)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self.report()

    def report(self) -> None:
        if self.sweep_dir is not None:
            print(summary(self.sweep_dir), flush=True)
            self.sweep_dir = None


def job_outcomes(sweep_dir: Path) -> list[JobOutcome]:
    """Every job that started in `sweep_dir` (a folder with Hydra's `.hydra/`)."""
    outcomes = []
    for hydra_dir in sorted(sweep_dir.rglob(".hydra")):
        folder = hydra_dir.parent
        if SUBMITIT_DIR in folder.relative_to(sweep_dir).parts:
            continue
        overrides = _read_yaml(hydra_dir / "overrides.yaml") or []
        outcomes.append(_outcome(sweep_dir, folder, [str(o) for o in overrides]))
    return outcomes


def summary(sweep_dir: Path) -> str:
    """One line of counts, then the overrides that set each unfinished job apart."""
    outcomes = job_outcomes(sweep_dir)
    counts = Counter(o.status for o in outcomes)
    head = f"[oodmol] sweep {sweep_dir}: {len(outcomes)} jobs" + "".join(
        f", {n} {status}" for status, n in sorted(counts.items())
    )
    shared = set.intersection(*(set(o.overrides) for o in outcomes)) if outcomes else set()
    lines = [head]
    for o in outcomes:
        if o.status == "complete":
            continue
        varying = " ".join(x for x in o.overrides if x not in shared)
        lines.append(f"  {o.status.upper()}: {varying or '(no sweep overrides)'}")
        lines.append(f"    folder: {o.folder}")
        if o.reason:
            lines.append(f"    reason: {o.reason}")
        if o.log is not None:
            lines.append(f"    log: {o.log}")
    return "\n".join(lines)


def _outcome(sweep_dir: Path, folder: Path, overrides: list[str]) -> JobOutcome:
    log = _submitit_log(sweep_dir, folder)
    try:
        record = read_record(folder)
    except RecordError:
        record = None
    if record is not None and record.complete:
        return JobOutcome(folder, overrides, "complete")
    if record is not None:
        failure = record.get("failure") or {}
        reason = f"{failure.get('kind', '?')}: {failure.get('message', 'no reason recorded')}"
        return JobOutcome(folder, overrides, record.status, reason, log)
    holder = holder_of(folder, LOCK_FILE)
    if holder is not None:
        return JobOutcome(folder, overrides, "running", f"training now ({holder})", log)
    if last_checkpoint(folder).is_file():
        reason = "stopped with a last.ckpt; a requeued job, or resume=true, goes on from it"
        return JobOutcome(folder, overrides, "interrupted", reason, log)
    reason = "no metrics.json: it crashed before writing one, or is still starting"
    return JobOutcome(folder, overrides, "no result", reason, log)


def _submitit_log(sweep_dir: Path, folder: Path) -> Path | None:
    """submitit names a job's files by its SLURM (or local) job id, which Hydra records
    as the job's hydra.job.id."""
    hydra = _read_yaml(folder / ".hydra" / "hydra.yaml")
    job_id = OmegaConf.select(hydra, "hydra.job.id") if hydra is not None else None
    if not job_id:
        return None
    logs = sorted((sweep_dir / SUBMITIT_DIR).glob(f"{job_id}/{job_id}_*_log.err"))
    return logs[0] if logs else None


def _read_yaml(path: Path) -> Any:
    try:
        return OmegaConf.load(path)
    except (OSError, ValueError, yaml.YAMLError):
        return None
