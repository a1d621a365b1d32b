"""The result files of a run: metrics.json, predictions.csv and parity.png, and where
the model gives uncertainties calibration.png, error_calibration.png and confidence.png."""

from __future__ import annotations

import importlib.metadata
import json
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from oodmol.eval.metrics import binned_r2, check_finite_predictions, regression_metrics
from oodmol.eval.plots import parity_plot
from oodmol.io import atomic_write_text
from oodmol.uq.evaluation import assess_uncertainty
from oodmol.uq.plots import uncertainty_figures

PACKAGES = ("oodmol", "torch", "lightning", "rdkit", "scikit-learn", "numpy", "hydra-core")
STD_COLUMNS = ("y_std", "y_std_epistemic", "y_std_aleatoric")


@dataclass
class SetPredictions:
    """Predictions for one set, aligned by position. `y_std` is the total predictive
    standard deviation; its epistemic and aleatoric parts where the model knows them."""

    name: str  # "id", "ood" or "val"
    mol_id: np.ndarray
    smiles: np.ndarray
    y_true: np.ndarray
    y_pred: np.ndarray
    y_std: np.ndarray | None = None
    y_std_epistemic: np.ndarray | None = None
    y_std_aleatoric: np.ndarray | None = None

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


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version(), "oodmol_commit": source_commit()}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def source_commit(where: Path = Path(__file__).parent) -> str:
    """The git commit of the code that ran, "+dirty" when tracked files differ from it,
    "unknown" outside a git checkout: one package version spans many commits, and a
    leaderboard should say which runs share code."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=where, capture_output=True, text=True, timeout=30, check=True
        ).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return commit + ("+dirty" if dirty else "")


def compute_metrics(sets: dict[str, SetPredictions], train_median: float) -> dict:
    """Regression metrics of the ID and OOD sets; the OOD set adds BOOM's binned R² (split
    at the median of the training targets). A non-finite prediction in any set stops
    everything, naming the molecules: a NaN metric would hide which inputs broke the
    model."""
    metrics: dict = {}
    for name, s in sets.items():
        check_finite_predictions(
            s.y_pred, [f"mol {i} ({smi})" for i, smi in zip(s.mol_id, s.smiles, strict=True)]
        )
        if name in ("id", "ood"):
            metrics[name] = regression_metrics(s.y_true, s.y_pred)
    if "ood" in sets:
        tails = binned_r2(sets["ood"].y_true, sets["ood"].y_pred, train_median)
        metrics["ood"].update(tails)
    return metrics


def write_results(
    out_dir: Path,
    sets: dict[str, SetPredictions],
    header: dict,
    train_median: float,
    property_label: str,
    units: str,
) -> tuple[dict, dict[str, object]]:
    """Write the files; returns the metrics and the figures by name (for loggers).

    `header["uq"]` (method, members) becomes the "uq" section, which the uncertainty
    metrics join when any set has a σ (see `oodmol.uq.evaluation`)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    metrics = {**header, **compute_metrics(sets, train_median)}
    uncertainty = assess_uncertainty(sets, header.get("uq"))
    if uncertainty is not None:
        metrics.update(uncertainty.metrics)
    metrics["train_median"] = float(train_median)
    metrics["versions"] = package_versions()
    atomic_write_text(out_dir / "metrics.json", json.dumps(_plain(metrics), indent=2))
    frame = pd.concat([s.frame() for s in sets.values()], ignore_index=True)
    atomic_write_text(out_dir / "predictions.csv", frame.to_csv(index=False))
    empty = np.zeros(0)
    id_set, ood_set = sets.get("id"), sets.get("ood")
    parity = parity_plot(
        out_dir / "parity.png",
        id_set.y_true if id_set else empty,
        id_set.y_pred if id_set else empty,
        ood_set.y_true if ood_set else empty,
        ood_set.y_pred if ood_set else empty,
        property_label,
        units,
        id_std=id_set.y_std if id_set else None,
        ood_std=ood_set.y_std if ood_set else None,
    )
    figures = {"parity": parity}
    if uncertainty is not None:
        figures.update(uncertainty_figures(out_dir, uncertainty.curves, units))
    return metrics, figures


def _plain(obj: object) -> object:
    """JSON-ready: numpy scalars to Python, NaN to null (JSON has no NaN)."""
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not np.isfinite(obj):
        return None
    return obj
