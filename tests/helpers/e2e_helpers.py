"""Helpers for the end-to-end tests that run the real command lines (train.py,
evaluate.py, python -m ...) on a tiny user CSV task.

Every CLI call is a process of its own in the repository root: a fork of the test
process's zygote, which imported oodmol's entry points once for every module
(`door_helpers.shared_doors`: a call then costs its work, not the seconds of imports),
or a fresh interpreter where the call brings an environment of its own. Independent
calls of a test module run side by side in a small thread pool.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from door_helpers import shared_doors
from paths import REPO

# A small neural model and a small forest; Morgan bits instead of the slower RDKit
# descriptors (the featuriser key is added: descriptors take no n_bits).
MORGAN = [
    "model.featurizer._target_=oodmol.data.featurize.fingerprints.MorganFingerprint",
    "+model.featurizer.n_bits=256",
]
MLP = ["model=mlp", "model.module.backbone.hidden=[16]", "model.max_epochs=2", *MORGAN]
RF = ["model=rf", "model.module.n_estimators=10", *MORGAN]
QUIET = ["threads=1", "progress=false"]
# configs/task/csv.yaml has no `name`, which ${task.name} needs: `++task.name` works
# around it (a strict xfail test in test_train_e2e.py tracks the bug)
TASK_NAME = "tiny"
N_MOLECULES = 120
OOD_SIZE = 20

# Para-disubstituted benzenes: 16 substituents give 136 distinct structures.
SUBSTITUENTS = (
    "C", "CC", "O", "OC", "N", "Cl", "F", "Br", "C(=O)O", "C#N", "C(F)(F)F",
    "[N+](=O)[O-]", "C(=O)N", "S(=O)(=O)N", "CCO", "C(C)C",
)  # fmt: skip


def tiny_molecules(n: int = N_MOLECULES) -> pd.DataFrame:
    """`n` distinct small molecules (SMILES written non-canonically on purpose) with
    their Crippen logP as a learnable, deterministic target `y`."""
    from rdkit import Chem
    from rdkit.Chem import Crippen

    rows = []
    for a, b in itertools.combinations_with_replacement(SUBSTITUENTS, 2):
        smiles = f"c1({a})ccc({b})cc1"
        rows.append((smiles, round(Crippen.MolLogP(Chem.MolFromSmiles(smiles)), 4)))
    frame = pd.DataFrame(rows[:n], columns=["smiles", "y"])
    canonical = {Chem.MolToSmiles(Chem.MolFromSmiles(s)) for s in frame["smiles"]}
    assert len(canonical) == n, "the tiny task's molecules must be distinct structures"
    return frame


@dataclass
class Result:
    """A finished CLI call."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float = 0.0
    started: float = 0.0  # time.monotonic() at the start

    def output(self, tail: int = 4000) -> str:
        return (
            f"$ {' '.join(self.args)}\n--- stdout\n{self.stdout[-tail:]}\n--- stderr\n"
            + (self.stderr[-tail:])
        )

    def ok(self) -> Result:
        assert self.returncode == 0, f"exit {self.returncode}\n{self.output()}"
        return self

    def failed(self) -> Result:
        assert self.returncode != 0, f"expected a failure\n{self.output()}"
        return self


HYDRA_WRAPPER = "Set the environment variable HYDRA_FULL_ERROR=1"


def ends_in_one_line(result: Result, code: int) -> str:
    """The last line of the terminal, once the call ended with `code`, without a
    traceback or Hydra's wrapper."""
    shown = result.stdout + result.stderr
    assert result.returncode == code, result.output()
    assert "Traceback" not in shown and HYDRA_WRAPPER not in shown, result.output()
    return shown.strip().splitlines()[-1]


# read when an interpreter or a native library starts, which a fork of the zygote does not
# (PYTHONPATH the zygote's child applies itself)
STARTUP_VARIABLES = ("PYTHONHOME", "PYTHONWARNINGS", "PYTHONHASHSEED", "PYTHONSTARTUP",
                     "LD_", "OMP_", "MKL_", "KMP_", "OPENBLAS_", "MALLOC_")  # fmt: skip


@dataclass
class TinyTask:
    """The tiny task of one test module: its CSV, its data dir (caches and split files
    shared by the module's runs) and the environment every CLI call gets."""

    root: Path
    csv: Path
    data_dir: Path
    molecules: pd.DataFrame  # row k is the CSV source's mol id k
    env: dict[str, str]
    pool: ThreadPoolExecutor = field(repr=False)
    jobs: dict[str, Future] = field(default_factory=dict, repr=False)
    notes: dict = field(default_factory=dict, repr=False)  # what tests share (split, files)
    # calls fork from the process's zygote (`door_helpers.shared_doors`) where they can;
    # False: every call is a fresh interpreter (a module that measures a process's memory)
    forked: bool = True

    @classmethod
    def create(cls, root: Path, workers: int | None = None, forked: bool = True) -> TinyTask:
        molecules = tiny_molecules()
        csv = root / "tiny.csv"
        molecules.to_csv(csv, index=False)
        data_dir = root / "data"
        data_dir.mkdir()
        env = {
            **os.environ,
            "OODMOL_DATA_DIR": str(data_dir),
            # anything written to the default runs/ folder lands here, not in the repo
            "PROJECT_ROOT": str(root / "project"),
            "PYTHONWARNINGS": "ignore",
        }
        workers = workers or max(2, os.cpu_count() or 1)
        return cls(root, csv, data_dir, molecules, env, ThreadPoolExecutor(workers), forked=forked)

    def task_args(self, name: bool = True) -> list[str]:
        args = [
            "task=csv",
            f"task.path={self.csv}",
            "task.target_column=y",
            f"task.ood_size={OOD_SIZE}",
        ]
        return [*args, f"++task.name={TASK_NAME}"] if name else args

    def run(
        self, command: Sequence[str], env: dict[str, str] | None = None, timeout: float = 480
    ) -> Result:
        """Run `python <command...>` in the repository root: a fork of the module's zygote
        for a script or `-m oodmol...` (what differs is the seconds of imports, which the
        zygote spent once), else a fresh interpreter, as for an environment that sets
        what only an interpreter's or a library's start reads (`STARTUP_VARIABLES`)."""
        args = [sys.executable, *command]
        started = time.monotonic()
        forkable = self.forked and not any(k.startswith(STARTUP_VARIABLES) for k in env or {})
        argv = _zygote_argv(command) if forkable else None
        if argv is not None:
            done = shared_doors().run(argv, env={**self.env, **(env or {})}, timeout=timeout)
            returncode, stdout, stderr = done.returncode, done.stdout, done.stderr
        else:
            proc = subprocess.run(
                args,
                cwd=REPO,
                env={**self.env, **(env or {})},
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            returncode, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
        seconds = time.monotonic() - started
        return Result(args, returncode, stdout, stderr, seconds, started)

    def submit(self, name: str, command: Sequence[str] | Callable[[], Result], **kw) -> None:
        """Start a CLI call (or a callable returning a Result) in the background."""
        job = command if callable(command) else lambda: self.run(command, **kw)
        self.jobs[name] = self.pool.submit(job)

    def submit_chain(self, *steps: tuple[str, Sequence[str] | Callable[[], Result]]) -> None:
        """Run steps one after another in one worker (a step that needs an earlier one's
        output), each under its own name; a failed step does not stop the next."""
        futures = {name: Future() for name, _ in steps}

        def chain() -> None:
            for name, command in steps:
                try:
                    futures[name].set_result(command() if callable(command) else self.run(command))
                except BaseException as error:  # handed to whoever asks for the result
                    futures[name].set_exception(error)

        self.jobs.update(futures)
        self.pool.submit(chain)

    def result(self, name: str) -> Result:
        return self.jobs[name].result()

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        if os.environ.get("OODMOL_E2E_TIMES"):  # where the module's wall time went
            done = {k: f.result() for k, f in self.jobs.items() if f.done() and not f.exception()}
            done = {k: r for k, r in done.items() if isinstance(r, Result)}  # not a pair of runs
            t0 = min((r.started for r in done.values()), default=0.0)
            for name, r in sorted(done.items(), key=lambda kv: kv[1].started):
                print(f"[e2e] {name:18s} start {r.started - t0:6.1f}s  took {r.seconds:6.1f}s")


def _zygote_argv(command: Sequence[str]) -> list[str] | None:
    """The zygote's argv of `python <command...>`, or None where it runs no such call."""
    if command and str(command[0]).endswith(".py"):
        return [str(c) for c in command]
    if list(command[:2]) == ["-m", "oodmol.cli"]:
        return ["oodmol", *map(str, command[2:])]
    if len(command) > 1 and command[0] == "-m" and str(command[1]).startswith("oodmol."):
        return [str(c) for c in command]
    return None


def scored_rows(predictions: pd.DataFrame) -> pd.DataFrame:
    """The ID and OOD rows of a predictions.csv (a run may also write other sets)."""
    return predictions[predictions["set"].isin(["id", "ood"])]


def load_tiny_split(tiny: TinyTask):
    """The tiny task's molecules and split, computed in this process exactly as the CLIs
    do (same config composition, same split file in the module's data dir)."""
    from hydra.utils import instantiate

    from oodmol.config import compose_config
    from oodmol.data.task import load_split, load_task

    cfg = compose_config("data", [*tiny.task_args(), "split=ood", "progress=false"])
    data = load_task(instantiate(cfg.task), tiny.data_dir, progress=False)
    return data, load_split(data, instantiate(cfg.split), tiny.data_dir)


def r2(y: np.ndarray, p: np.ndarray) -> float:
    """Plain R² (1 − SS_res/SS_tot), NaN where undefined."""
    y, p = np.asarray(y, float), np.asarray(p, float)
    if y.size < 2 or np.all(y == y[0]):
        return float("nan")
    return 1.0 - float(np.sum((y - p) ** 2)) / float(np.sum((y - y.mean()) ** 2))


def hand_metrics(y: np.ndarray, p: np.ndarray) -> dict[str, float]:
    err = np.asarray(y, float) - np.asarray(p, float)
    return {
        "n": int(err.size),
        "rmse": float(np.sqrt(np.mean(err**2))),
        "mae": float(np.mean(np.abs(err))),
        "r2": r2(y, p),
    }


def hand_binned(y: np.ndarray, p: np.ndarray, median: float) -> dict[str, float]:
    """BOOM's binned R²: R² in the low (y < median) and high tail, and their mean."""
    y, p = np.asarray(y, float), np.asarray(p, float)
    high = y >= median
    low_r2, high_r2 = r2(y[~high], p[~high]), r2(y[high], p[high])
    defined = [v for v in (low_r2, high_r2) if not np.isnan(v)]
    return {"binned_r2": float(np.mean(defined)), "r2_low": low_r2, "r2_high": high_r2}


def same_number(a: float | None, b: float | None) -> bool:
    """Equal to float precision; None (JSON's NaN) only equals NaN/None."""
    if a is None or b is None or np.isnan(a) or np.isnan(b):
        return (a is None or np.isnan(a)) and (b is None or np.isnan(b))
    return bool(np.isclose(a, b, rtol=1e-9, atol=1e-12))


PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
