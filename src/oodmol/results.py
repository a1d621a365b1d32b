"""The result files of a run: metrics.json, predictions.csv and parity.png, and where
the model gives uncertainties calibration.png, error_calibration.png and confidence.png.

Writing them takes both the regression metrics (`oodmol.eval`) and the uncertainty
assessment (`oodmol.uq`), so it lives above both packages, which stay independent."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from oodmol.eval.plots import parity_plot
from oodmol.eval.regression import compute_metrics
from oodmol.io import atomic_write_text
from oodmol.predictions import SetPredictions
from oodmol.provenance import package_versions
from oodmol.uq.assessment import UncertaintyReport, assess_uncertainty
from oodmol.uq.plots import uncertainty_figures


def write_results(
    out_dir: Path,
    sets: dict[str, SetPredictions],
    header: dict,
    train_median: float,
    property_label: str,
    units: str,
    *,
    calibrators: Sequence[str] | None = None,
    evaluators: Sequence[str] | None = None,
) -> tuple[dict, dict[str, object]]:
    """Write the files; returns the metrics and the figures by name (for loggers).

    metrics.json comes last: it marks the run complete (a train.py run with it is done,
    never trained again), so it must not exist before the files it vouches for.

    `header["uq"]` (method, members) becomes the "uq" section, which the uncertainty
    metrics join when any set has a σ; `calibrators` and `evaluators` name the
    recalibrations and metrics to run, None for all (see `oodmol.uq.assessment`)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    metrics, uncertainty = run_metrics(sets, header, train_median, calibrators, evaluators)
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
    atomic_write_text(out_dir / "metrics.json", json.dumps(metrics, indent=2))
    return metrics, figures


def run_metrics(
    sets: dict[str, SetPredictions],
    header: dict,
    train_median: float,
    calibrators: Sequence[str] | None = None,
    evaluators: Sequence[str] | None = None,
) -> tuple[dict, UncertaintyReport | None]:
    """A run's metrics.json content (JSON-ready: NaN as null) and the uncertainty
    report behind its figures, without writing anything."""
    metrics = {**header, **compute_metrics(sets, train_median)}
    uncertainty = assess_uncertainty(sets, header.get("uq"), calibrators, evaluators)
    if uncertainty is not None:
        metrics.update(uncertainty.metrics)
    metrics["train_median"] = float(train_median)
    metrics["versions"] = package_versions()
    return _plain(metrics), uncertainty


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
