"""What a data source hands to validation: raw records plus what reading found."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from oodmol.data.report import DataReport
from oodmol.data.table import Geometry


@dataclass
class RawData:
    mol_id: np.ndarray  # int64, unique, stable across reads
    smiles: list[str]
    targets: dict[str, np.ndarray]  # float64; NaN where a cell was missing or unreadable
    geometry: Geometry | None
    report: DataReport


class Source(ABC):
    """A data set: where its records come from and which elements it may contain."""

    def __init__(self, name: str, elements: list[str] | None = None) -> None:
        self.name = name
        self.elements = sorted(elements) if elements else None

    @abstractmethod
    def read(self, data_dir: Path) -> RawData:
        """Read every record, naming the ones that could not be read."""

    @abstractmethod
    def fingerprint(self, data_dir: Path) -> dict:
        """Identifies the raw content cheaply, so a cached table notices a new source."""
