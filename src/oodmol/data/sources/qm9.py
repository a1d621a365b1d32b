"""QM9 as shipped by the PyPI package qm9pack (130,831 molecules, DFT geometries)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd

from oodmol.data.sources.base import RawData, Source
from oodmol.data.table import Geometry
from oodmol.data.validation_report import DataReport

# qm9pack column -> our target name; units in configs/task/qm9_*.yaml.
PROPERTIES = {
    "Dipole_debye": "mu",
    "Polarizability_bohr3": "alpha",
    "HOMO_au": "homo",
    "LUMO_au": "lumo",
    "HOMO_LUMO_gap_au": "gap",
    "R2_bohr2": "r2",
    "ZPVE_au": "zpve",
    "Heatcapacity_Cv_cal_mol_K": "cv",
}
PARTS = ("qm9_part1.csv", "qm9_part2.csv", "qm9_part3.csv")
SYMBOLS = {"H": 1, "C": 6, "N": 7, "O": 8, "F": 9}


def qm9pack_data_dir() -> Path:
    """The package's data folder, found without importing qm9pack (its import needs
    pkg_resources, which modern setuptools no longer ships)."""
    spec = importlib.util.find_spec("qm9pack")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("QM9 needs the PyPI package qm9pack: pip install qm9pack")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


class QM9Source(Source):
    """QM9's `Index` is the molecule id; SMILES, geometry and the eight BOOM properties."""

    def read(self, data_dir: Path) -> RawData:
        folder = qm9pack_data_dir()
        columns = ["Index", "SMILES", "N_atoms", "Elements", "XYZ_Ang", *PROPERTIES]
        frame = pd.concat(
            [pd.read_csv(folder / part, usecols=columns) for part in PARTS], ignore_index=True
        )
        report = DataReport(self.name, n_read=len(frame))
        geometry = _parse_geometry(frame)
        return RawData(
            mol_id=frame["Index"].to_numpy(np.int64),
            smiles=frame["SMILES"].astype(str).tolist(),
            targets={ours: frame[col].to_numpy(np.float64) for col, ours in PROPERTIES.items()},
            geometry=geometry,
            report=report,
        )

    def fingerprint(self, data_dir: Path) -> dict:
        folder = qm9pack_data_dir()
        return {
            "qm9pack": importlib.metadata.version("qm9pack"),
            "sizes": [(folder / p).stat().st_size for p in PARTS],
        }


def _parse_geometry(frame: pd.DataFrame) -> Geometry:
    """Parse all "[[x,y,z],...]" and "['C','H',...]" cells in one vectorised pass."""
    n_atoms = frame["N_atoms"].to_numpy(np.int64)
    offsets = np.concatenate([[0], np.cumsum(n_atoms)]).astype(np.int64)
    xyz_text = ",".join(frame["XYZ_Ang"].tolist()).replace("[", "").replace("]", "")
    coords = np.array(xyz_text.split(","), dtype=np.float64).reshape(-1, 3)
    symbol_text = ",".join(frame["Elements"].tolist())
    symbols = symbol_text.replace("[", "").replace("]", "").replace("'", "").split(",")
    if len(symbols) != offsets[-1] or len(coords) != offsets[-1]:
        raise ValueError(
            f"QM9 geometry does not match N_atoms: {len(symbols)} symbols, "
            f"{len(coords)} coordinates, {offsets[-1]} atoms declared"
        )
    atomic_numbers = np.array([SYMBOLS[s.strip()] for s in symbols], dtype=np.int8)
    return Geometry(atomic_numbers, coords.astype(np.float32), offsets)
