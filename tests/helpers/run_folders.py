"""Run folders made by hand for the tests that read folders of runs (ablations, reports):
a run's record with the metrics a test gives, and its Hydra config where asked."""

from __future__ import annotations

import json
from pathlib import Path

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run_folder(folder: Path, metrics: dict, config: str = "") -> None:
    folder.mkdir(parents=True)
    record = {
        "status": "complete",
        "split_hash": "h",
        "training": {"max_epochs": 30},
        "id": {"rmse": 1.0, "r2": 0.5},
        **metrics,
    }
    record["ood"] = {"binned_r2": 0.5, **record.get("ood", {})}
    (folder / "metrics.json").write_text(json.dumps(record))
    if config:
        (folder / ".hydra").mkdir()
        (folder / ".hydra" / "config.yaml").write_text(config)
