"""A set's predictions as a run's result files hold them: one row per molecule, with the
predictive standard deviations where the model gives them. Shared by the code that makes
predictions (the test-end callback, external files, combined ensemble members) and the
code that scores them (regression and uncertainty metrics)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

STD_COLUMNS = ("y_std", "y_std_epistemic", "y_std_aleatoric")


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
