"""What a data source hands to validation: raw records plus what reading found."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from oodmol.data.limits import MoleculeLimits
from oodmol.data.table import Geometry
from oodmol.data.validation_report import DataReport
from oodmol.names import check_name


@dataclass
class RawData:
    mol_id: np.ndarray  # int64, unique, stable across reads
    smiles: list[str]
    targets: dict[str, np.ndarray]  # float64; NaN where a cell was missing or unreadable
    geometry: Geometry | None
    report: DataReport


class Source(ABC):
    """A data set: where its records come from, which elements it may contain, and how
    large its molecules may be (`limits`: the keys of `MoleculeLimits`, whose defaults
    fill in the rest)."""

    def __init__(
        self,
        name: str,
        elements: list[str] | None = None,
        limits: Mapping[str, Any] | None = None,
    ) -> None:
        self.name = check_name(name, "the data source's name")
        self.elements = sorted(elements) if elements else None
        self.limits = MoleculeLimits(**(limits or {}))

    @abstractmethod
    def read(self, data_dir: Path) -> RawData:
        """Read every record, naming the ones that could not be read."""

    @abstractmethod
    def fingerprint(self, data_dir: Path) -> dict:
        """Identifies the raw content cheaply, so a cached table notices a new source."""
