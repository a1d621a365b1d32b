"""A set's predictions as a run's result files hold them: one row per molecule, with the
predictive standard deviations where the model gives them. Shared by the code that makes
predictions (the test-end callback, external files, combined ensemble members) and the
code that scores them (regression and uncertainty metrics)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from oodmol.bounded import MB, check_size
from oodmol.errors import InputError

PREDICTIONS_FILE = "predictions.csv"
STD_COLUMNS = ("y_std", "y_std_epistemic", "y_std_aleatoric")
COLUMNS = ("mol_id", "smiles", "set", "y_true", "y_pred")

# a QM9 run's predictions.csv is about 2 MB
MAX_PREDICTIONS_BYTES = 512 * MB


class PredictionsFileError(InputError):
    """A run folder's predictions.csv that is not what a run writes."""


@dataclass
class SetPredictions:
    """Predictions for one set, aligned by position. `y_std` is the total predictive
    standard deviation; its epistemic and aleatoric parts where the model knows them.
    `flags`: per-molecule marks the model raised about its predictions (the Regression
    Transformer's `malformed` decodes), written as 0/1 columns."""

    name: str  # "id", "ood" or "val"
    mol_id: np.ndarray
    smiles: np.ndarray
    y_true: np.ndarray
    y_pred: np.ndarray
    y_std: np.ndarray | None = None
    y_std_epistemic: np.ndarray | None = None
    y_std_aleatoric: np.ndarray | None = None
    flags: dict[str, np.ndarray] | None = None

    def frame(self) -> pd.DataFrame:
        columns = {
            "mol_id": self.mol_id,
            "smiles": self.smiles,
            "set": self.name,
            "y_true": self.y_true,
            "y_pred": self.y_pred,
        }
        for name in STD_COLUMNS:
            if getattr(self, name) is not None:
                columns[name] = getattr(self, name)
        for name, marked in (self.flags or {}).items():
            columns[name] = np.asarray(marked, dtype=np.int64)
        return pd.DataFrame(columns)


def std_columns(
    var_epistemic: np.ndarray | None, var_aleatoric: np.ndarray | None
) -> dict[str, np.ndarray | None]:
    """SetPredictions' σ fields from variance components: total σ = sqrt of their sum."""
    parts = [v for v in (var_epistemic, var_aleatoric) if v is not None]
    return {
        "y_std": np.sqrt(sum(parts)) if parts else None,
        "y_std_epistemic": None if var_epistemic is None else np.sqrt(var_epistemic),
        "y_std_aleatoric": None if var_aleatoric is None else np.sqrt(var_aleatoric),
    }


def read_predictions_file(folder_or_file: str | Path) -> pd.DataFrame:
    """A run's predictions.csv as its writer made it (in a run folder, or the file),
    checked: the columns a run writes, whole-number mol_ids, finite numbers. A file
    someone sent may be anything, and every reader (ensembles, campaigns, the
    leaderboard) trusts these columns."""
    path = Path(folder_or_file)
    if path.is_dir():
        path = path / PREDICTIONS_FILE
    try:
        check_size(path, MAX_PREDICTIONS_BYTES, "predictions file")
        frame = pd.read_csv(path)
    except FileNotFoundError:
        raise PredictionsFileError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise PredictionsFileError(f"{path}: unreadable ({error})") from None
    missing = [c for c in COLUMNS if c not in frame]
    if missing:
        raise PredictionsFileError(f"{path}: no column {missing}; a run writes {list(COLUMNS)}")
    numeric = ["y_true", "y_pred", *(c for c in STD_COLUMNS if c in frame)]
    for column in ["mol_id", *numeric]:
        values = pd.to_numeric(frame[column], errors="coerce")
        bad = values.isna() | ~np.isfinite(values.astype(float))
        if column == "mol_id":
            bad |= values.fillna(0) != values.fillna(0).round()
        if bad.any():
            line = int(np.flatnonzero(bad.to_numpy())[0]) + 2
            raise PredictionsFileError(
                f"{path} line {line}: {column} {frame[column].iloc[line - 2]!r} is not "
                f"{'a molecule id' if column == 'mol_id' else 'a finite number'}"
            )
        frame[column] = values.astype(np.int64 if column == "mol_id" else float)
    return frame
