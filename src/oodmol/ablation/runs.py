"""The finished runs below a folder, as the ablation figures read them: their records
(`oodmol.run_record`), ensemble members and search trials left out."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from oodmol.errors import InputError, MissingFileError
from oodmol.run_record import RunRecord, iter_runs


@dataclass(frozen=True)
class Run:
    """One complete, tested run."""

    record: RunRecord

    @property
    def folder(self) -> Path:
        return self.record.folder

    @cached_property
    def metrics(self) -> dict[str, Any]:
        """The record as its metrics.json holds it."""
        return self.record.to_json()

    @property
    def _hydra_file(self) -> Path:
        return self.folder / ".hydra" / "config.yaml"

    @cached_property
    def _hydra_config(self) -> dict[str, Any]:
        """The run's Hydra config as written, read once ({} where the run has none)."""
        file = self._hydra_file
        return OmegaConf.to_container(OmegaConf.load(file)) if file.is_file() else {}  # type: ignore[return-value]

    def setting(self, *path: str) -> Any:
        """A setting of the run, from the identity its record holds (None where the
        identity leaves out a setting at its default), or for runs recorded before
        records held it from the run's Hydra config (`.hydra/config.yaml`, as written)."""
        identity = self.record.identity
        if identity is not None and path and path[0] == "split":
            node: Any = identity
            for key in path:
                node = node.get(key) if isinstance(node, dict) else None
            return node
        node = self._hydra_config
        for key in path:
            if not isinstance(node, dict) or key not in node:
                raise InputError(f"{self._hydra_file}: no {'.'.join(path)}")
            node = node[key]
        return node


def complete_runs(folder: Path) -> tuple[list[Run], list[str]]:
    """Every run below `folder` that ended with test metrics, and why others were left out
    (unreadable, failed, a search trial); ensemble members are parts of their runs."""
    if not folder.is_dir():
        raise MissingFileError(f"{folder}: no such folder")
    skipped: list[tuple[Path, str]] = []
    runs = []
    for record in iter_runs(folder, skipped=skipped):
        if record.tested:
            runs.append(Run(record))
        else:
            skipped.append((record.path, "a search trial: validated, never tested"))
    return runs, [f"{path}: {reason}" for path, reason in skipped]
