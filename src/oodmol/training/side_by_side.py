"""Ensemble members trained at once (`uq.parallel`), each in a process of its own.

A small model leaves most of a GPU idle (EGNN's 10k-set epoch keeps an H200 10 % busy)
and one core of a CPU machine idle; members trained side by side share the device
instead of waiting for each other. Each member is the run `train.py ... uq.member=<k>`
that a multirun of members makes, in its folder `<run>/members/<k>/`: its seed, data
order, checkpoints and record are those of the member trained in turn, bit for bit at
the same thread count (tests/e2e/test_uq_train.py). Processes rather than parameters
stacked in one model: every member keeps its own batches, learning-rate schedule, early
stop and best checkpoint, which a stacked model would have to share or imitate.

Each member's console output goes to `<run>/members/<k>.log`. A member that fails
ends the run with its own last line and exit status once the others are done (the
lowest-numbered one where several fail, so the message does not depend on timing); a stop
signal goes on to every member, each saves its last checkpoint, and `resume=true` goes
on from them."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from oodmol.errors import OodmolError
from oodmol.interrupts import interruptible
from oodmol.training.child import ForkedRun, start_train

# overrides a member's command sets itself, in place of the run's
OWN_SETTINGS = ("uq.member", "uq.parallel", "threads", "progress")
POLL_S = 0.2
STOP_WAIT_S = 600  # a member stopped by a signal saves its checkpoint first


class MemberFailed(OodmolError):
    """A member whose process failed: the run ends with its message and exit status."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def can_run_side_by_side() -> bool:
    """Whether the run came from a command line that members can repeat (train.py's,
    not a config composed in Python)."""
    return HydraConfig.initialized()


def member_overrides(member: int, folder: Path, threads: int) -> list[str]:
    """train.py's arguments for member `member` of the run, into `folder`."""
    hydra = HydraConfig.get()
    own = [o for o in hydra.overrides.task if o.lstrip("+~").split("=")[0] not in OWN_SETTINGS]
    searchpath = [o for o in hydra.overrides.hydra if o.startswith("hydra.searchpath=")]
    return [
        *own, *searchpath, f"uq.member={member}", f"threads={threads}", "progress=false",
        f"hydra.run.dir={folder}",
    ]  # fmt: skip


def threads_per_member(cfg: DictConfig, parallel: int) -> int:
    """The run's threads (all cores where unset) shared among the members at once."""
    return max(1, (cfg.threads or os.cpu_count() or 1) // parallel)


def train_side_by_side(cfg: DictConfig, folders: list[Path], parallel: int) -> None:
    """Train member k into folders[k], `parallel` at a time, each as its own process
    (forked from the training fork server, `oodmol.training.child`)."""
    parallel = min(parallel, len(folders))
    threads = threads_per_member(cfg, parallel)
    waiting = list(enumerate(folders))
    running: dict[int, tuple[ForkedRun, Path]] = {}
    failed: list[tuple[int, int, Path]] = []  # member, exit status, its log
    print(f"[oodmol] {len(folders)} members, {parallel} at a time, {threads} thread(s) each")
    doing = f"training {len(folders)} members side by side"
    outcome = "each member keeps its last checkpoint; run the same command with resume=true"
    with interruptible(doing, outcome):
        try:
            while waiting or running:
                while waiting and len(running) < parallel:
                    member, folder = waiting.pop(0)
                    running[member] = _start(member, folder, threads)
                for member, (process, log) in list(running.items()):
                    if process.poll() is not None:
                        del running[member]
                        if process.returncode:
                            failed.append((member, process.returncode, log))
                time.sleep(POLL_S)
        finally:
            _stop(running)
    if failed:
        member, code, log = min(failed)  # the lowest-numbered, whichever ended first
        others = f" ({len(failed) - 1} more member(s) failed too)" if len(failed) > 1 else ""
        line = _last_line(log)
        raise MemberFailed(f"member {member} failed (exit {code}): {line}{others}; see {log}", code)


def _start(member: int, folder: Path, threads: int) -> tuple[ForkedRun, Path]:
    log = folder.parent / f"{member}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    return start_train(member_overrides(member, folder, threads), log), log


def _stop(running: dict[int, tuple[ForkedRun, Path]]) -> None:
    """Members still running when the run stops get SIGTERM (they save their last
    checkpoint at the next batch) and are waited for."""
    for process, _ in running.values():
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process, _ in running.values():
        try:
            process.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _last_line(log: Path) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no output"
