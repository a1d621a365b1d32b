"""The finished runs below a folder, as the ablation figures read them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from oodmol.errors import InputError, MissingFileError


@dataclass(frozen=True)
class Run:
    """One complete run: its folder and its metrics.json."""

    folder: Path
    metrics: dict

    def setting(self, *path: str):
        """A setting of the run's own Hydra config (`.hydra/config.yaml`), as written
        (interpolations unresolved); KeyError naming the file when absent."""
        file = self.folder / ".hydra" / "config.yaml"
        node = OmegaConf.to_container(OmegaConf.load(file)) if file.is_file() else {}
        for key in path:
            if not isinstance(node, dict) or key not in node:
                raise InputError(f"{file}: no {'.'.join(path)}")
            node = node[key]
        return node


def complete_runs(folder: Path) -> tuple[list[Run], list[str]]:
    """Every run below `folder` that ended with test metrics, and why others were left out
    (unreadable, failed, a search trial or an ensemble member)."""
    if not folder.is_dir():
        raise MissingFileError(f"{folder}: no such folder")
    runs, skipped = [], []
    for path in sorted(folder.rglob("metrics.json")):
        try:
            metrics = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            skipped.append(f"{path}: unreadable ({error})")
            continue
        if not isinstance(metrics, dict) or metrics.get("status") != "complete":
            skipped.append(f"{path}: not a complete run")
        elif not isinstance(metrics.get("ood"), dict) or "rmse" not in metrics["ood"]:
            skipped.append(f"{path}: no OOD test metrics")
        elif "members" in path.parts:
            skipped.append(f"{path}: an ensemble member")
        else:
            runs.append(Run(path.parent, metrics))
    return runs, skipped
