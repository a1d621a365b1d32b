"""The result files of a run: metrics.json (its `RunRecord`), predictions.csv and
parity.png, and where the model gives uncertainties calibration.png,
error_calibration.png and confidence.png.

Writing them takes both the regression metrics (`oodmol.metrics`) and the uncertainty
assessment (`oodmol.uq`), which never import each other."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from oodmol.io import atomic_write_text
from oodmol.metrics.plots import parity_plot
from oodmol.metrics.sets import compute_metrics, extrapolation_section
from oodmol.metrics.stretch import stretched_section
from oodmol.predictions import PREDICTIONS_FILE, SetPredictions
from oodmol.provenance import package_versions
from oodmol.run_record import RunRecord
from oodmol.uq.assessment import UncertaintyReport, assess_uncertainty
from oodmol.uq.plots import uncertainty_figures


def write_results(
    out_dir: Path,
    sets: dict[str, SetPredictions],
    record: RunRecord,
    train_median: float,
    property_label: str,
    units: str,
    *,
    calibrators: Sequence[str] | None = None,
    evaluators: Sequence[str] | None = None,
    train_range: tuple[float, float] | None = None,
) -> tuple[RunRecord, dict[str, object]]:
    """Score `sets` into `record` and write the result files; returns the scored record
    and the figures by name (for loggers).

    metrics.json comes last: it marks the run complete (a train.py run with it is done,
    never trained again), so it must not exist before the files it vouches for.

    `record.uq` (method, members) becomes the "uq" section, which the uncertainty
    metrics join when any set has a σ; `calibrators` and `evaluators` name the
    recalibrations and metrics to run, None for all (see `oodmol.uq.assessment`).
    `train_range` (the training targets' minimum and maximum) adds the tails' offsets to
    the extrapolation section."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    record, uncertainty = scored(
        sets, record, train_median, calibrators, evaluators, train_range=train_range
    )
    frame = pd.concat([s.frame() for s in sets.values()], ignore_index=True)
    atomic_write_text(out_dir / PREDICTIONS_FILE, frame.to_csv(index=False))
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
    record.write(out_dir)
    return record, figures


def scored(
    sets: dict[str, SetPredictions],
    record: RunRecord,
    train_median: float,
    calibrators: Sequence[str] | None = None,
    evaluators: Sequence[str] | None = None,
    *,
    train_range: tuple[float, float] | None = None,
) -> tuple[RunRecord, UncertaintyReport | None]:
    """`record` with the sets' regression, extrapolation and uncertainty metrics (and
    those of the predictions stretched by the validation line, `oodmol.metrics.stretch`), the
    training median the OOD set's binned R² split at (and the training range, where
    given), and the package versions; the uncertainty report behind the figures. Nothing
    is written."""
    uncertainty = assess_uncertainty(sets, record.uq, calibrators, evaluators)
    sections: dict = {"train_median": float(train_median)}
    if train_range is not None:
        sections["train_range"] = [float(train_range[0]), float(train_range[1])]
    extrapolation = extrapolation_section(sets, train_median, train_range)
    stretched = stretched_section(sets, train_median, train_range)
    for name, section in (("extrapolation", extrapolation), ("stretched", stretched)):
        if section is not None:
            sections[name] = section
    uq = record.uq
    if uncertainty is not None:
        uq = uncertainty.metrics["uq"]
        sections |= {k: v for k, v in uncertainty.metrics.items() if k != "uq"}
    out = replace(
        record,
        uq=uq,
        metrics=compute_metrics(sets, train_median),
        versions=package_versions(),
    )
    return out.with_sections(**sections), uncertainty
