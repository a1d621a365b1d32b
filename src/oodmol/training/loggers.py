"""Loggers whose files survive a resume: the epochs logged before an interruption stay,
the steps logged after the checkpoint the run resumes from are dropped (the resumed run
logs them again), and a fresh start in a folder clears what an earlier attempt left.

The CSV log is read back when a run resumes, so a torn write must not corrupt it. A
save appends its rows and flushes them to disk; where a column appears, the file is
rewritten whole, atomically (`oodmol.io`), where Lightning truncates and rewrites it in
place. A kill or a full disk can then cut only the last row of an append, and a resumed
run reads the log up to its last complete line. (Rewriting the whole log at every save
cost a QM9 MLP a quarter of its training time by its 25th epoch, and more each epoch.)"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path
from typing import Protocol, runtime_checkable

from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.pytorch.loggers import CSVLogger as LightningCSVLogger
from lightning.pytorch.loggers import TensorBoardLogger as LightningTensorBoardLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter

from oodmol.io import atomic_write_text


@runtime_checkable
class Resumable(Protocol):
    def resume_at(self, step: int | None) -> None:
        """Continue the log of a run resumed at global step `step`; None: a fresh start."""


class CSVLogger(LightningCSVLogger):
    """Lightning's CSV logger, which deletes an existing metrics.csv when it starts,
    made to keep the rows of the steps before `resume_at(step)`."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._resume_step: int | None = None

    def resume_at(self, step: int | None) -> None:
        self._resume_step = step

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            self._experiment = _ContinuedWriter(self.log_dir, self._resume_step)
        return self._experiment


class _ContinuedWriter(ExperimentWriter):
    """Starts from the complete rows of an existing metrics.csv logged before
    `resume_step`; appends what each save brings, and rewrites the file whole where a
    column appears."""

    def __init__(self, log_dir: str, resume_step: int | None) -> None:
        self._resume_step = resume_step
        self._rows: list[dict] = []
        super().__init__(log_dir)

    def _check_log_dir_exists(self) -> None:
        path = Path(self.metrics_file_path)
        if self._resume_step is None or not path.is_file():
            path.unlink(missing_ok=True)
            return
        text = path.read_text()
        complete = text[: text.rfind("\n") + 1]  # an append cut by a kill: its last row
        reader = csv.DictReader(io.StringIO(complete))
        self.metrics_keys = list(reader.fieldnames or [])
        self._rows = [row for row in reader if int(float(row["step"])) < self._resume_step]
        self._write()

    def save(self) -> None:
        """Lightning's rows appended; the file written whole where it has a new column
        (sorted in) or does not exist."""
        if not self.metrics:
            return
        path = Path(self.metrics_file_path)
        new_columns = self._record_new_keys()
        self._rows.extend(self.metrics)
        if new_columns or not path.is_file():
            self._write()
        else:
            with path.open("a", newline="") as file:
                csv.DictWriter(file, fieldnames=self.metrics_keys).writerows(self.metrics)
                file.flush()
                os.fsync(file.fileno())
        self.metrics = []

    def _write(self) -> None:
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=self.metrics_keys)
        writer.writeheader()
        writer.writerows(self._rows)
        atomic_write_text(Path(self.metrics_file_path), text.getvalue())


class TensorBoardLogger(LightningTensorBoardLogger):
    """TensorBoard's own `purge_step` hides the events of the interrupted attempt from
    the resume step on; a fresh start removes earlier event files."""

    def resume_at(self, step: int | None) -> None:
        if step is None:
            for events in Path(self.log_dir).glob("events.out.tfevents.*"):
                events.unlink()
        else:
            self._kwargs["purge_step"] = step
