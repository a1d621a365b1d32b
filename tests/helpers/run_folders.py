"""Run folders made by hand for the tests that read folders of runs (ablations, reports):
a run's record with the metrics a test gives, and its Hydra config where asked."""

from __future__ import annotations

import json
from pathlib import Path

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run_folder(folder: Path, metrics: dict, config: str = "") -> None:
    folder.mkdir(parents=True)
    record = {
        "task": "t",
        "split": "ood",
        "model": "m",
        "status": "complete",
        "split_hash": "h",
        "training": {"max_epochs": 30},
        **metrics,
    }
    record["id"] = {"rmse": 1.0, "r2": 0.5, **metrics.get("id", {})}
    record["ood"] = {"rmse": 1.0, "binned_r2": 0.5, **metrics.get("ood", {})}
    (folder / "metrics.json").write_text(json.dumps(record))
    if config:
        (folder / ".hydra").mkdir()
        (folder / ".hydra" / "config.yaml").write_text(config)
