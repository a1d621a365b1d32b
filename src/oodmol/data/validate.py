"""Chemistry validation: every molecule is parsed, sanitised and canonicalised by RDKit,
and every record dropped or changed on the way is written into the data report.

Records over the size limits (`oodmol.data.limits`) are refused before RDKit's work, and
parsing runs in supervised worker processes, so that a record that crashes RDKit or runs
past the time limit is dropped with the reason and the others are validated."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import partial

import numpy as np
from rdkit import Chem, RDLogger

from oodmol.data.limits import (
    DEFAULT_LIMITS,
    MoleculeLimits,
    atom_count,
    length_problem,
    shown,
    size_problem,
)
from oodmol.data.sources.base import RawData
from oodmol.data.table import MoleculeTable
from oodmol.data.validation_report import DataReport, Finding
from oodmol.parallel import Refused, process_map

DIFFERENT_TARGET = "duplicate structure with a different target"


@dataclass(frozen=True)
class Parsed:
    canonical: str | None
    error: str
    n_fragments: int
    elements: tuple[str, ...]
    composition: tuple[tuple[int, int], ...]  # (atomic number, count) with hydrogens


def parse_smiles(
    smiles: str, composition: bool = False, limits: MoleculeLimits = DEFAULT_LIMITS
) -> Parsed:
    """Parse, sanitise and canonicalise one SMILES; an error is returned, not raised.

    A SMILES over `limits.max_smiles_length` is refused before RDKit reads it, a molecule
    of more than `limits.max_atoms` heavy atoms before RDKit sanitises it. The element
    composition with hydrogens (a third of the cost) only when asked, to check a geometry
    against its SMILES."""
    problem = length_problem(smiles, limits.max_smiles_length)
    if problem:
        return Parsed(None, problem, 0, (), ())
    RDLogger.DisableLog("rdApp.*")
    mol = Chem.MolFromSmiles(smiles, sanitize=False)
    if mol is None:
        return Parsed(None, "unparseable SMILES", 0, (), ())
    problem = size_problem(atom_count(mol), limits.max_atoms)
    if problem:
        return Parsed(None, problem, 0, (), ())
    try:
        Chem.SanitizeMol(mol)
    except Exception as error:  # RDKit raises several exception types for bad valences
        return Parsed(None, f"RDKit sanitisation failed: {type(error).__name__}", 0, (), ())
    counts = (
        Counter(atom.GetAtomicNum() for atom in Chem.AddHs(mol).GetAtoms()) if composition else {}
    )
    return Parsed(
        canonical=Chem.MolToSmiles(mol),
        error="",
        n_fragments=len(Chem.GetMolFrags(mol)),
        elements=tuple(sorted({atom.GetSymbol() for atom in mol.GetAtoms()})),
        composition=tuple(sorted(counts.items())),
    )


def parse_all(
    smiles: list[str],
    progress: bool,
    n_jobs: int | None = None,
    composition: bool = False,
    limits: MoleculeLimits = DEFAULT_LIMITS,
) -> list[Parsed]:
    """`parse_smiles` of a whole data set, across cores, in worker processes: a SMILES
    that crashes RDKit or takes longer than `limits.time_limit` is refused with the
    reason, the others are parsed."""
    results = process_map(
        partial(parse_smiles, composition=composition, limits=limits),
        smiles,
        total=len(smiles),
        desc="validating molecules",
        n_jobs=n_jobs,
        progress=progress,
        time_limit=limits.time_limit,
    )
    return [Parsed(None, r.reason, 0, (), ()) if isinstance(r, Refused) else r for r in results]


def validate(
    raw: RawData,
    elements: list[str] | None,
    progress: bool = True,
    n_jobs: int | None = None,
    limits: MoleculeLimits = DEFAULT_LIMITS,
) -> tuple[MoleculeTable, DataReport]:
    """Keep the records that are valid molecules within `limits`; name every one that
    is not.

    Duplicate structures (same canonical SMILES) keep the lowest molecule id, so no
    structure can end up in two sets of a split; those whose targets disagree are
    reported apart, as the data set cannot say which value is right.
    """
    report = raw.report
    n_read_ok = len(raw.mol_id)
    report.n_read = report.count("dropped") + n_read_ok
    parsed = parse_all(
        raw.smiles, progress, n_jobs, composition=raw.geometry is not None, limits=limits
    )
    keep = np.ones(n_read_ok, dtype=bool)
    first_of: dict[str, int] = {}  # canonical SMILES -> row of the molecule kept
    allowed = set(elements) if elements else None
    n_changed = 0
    for row, (mol_id, smiles, p) in enumerate(zip(raw.mol_id, raw.smiles, parsed, strict=True)):
        where = f"mol {mol_id}"
        if p.canonical is None:
            report.record(p.error, "dropped", where, repr(shown(smiles)))
            keep[row] = False
            continue
        if allowed is not None and not set(p.elements) <= allowed:
            outside = ",".join(sorted(set(p.elements) - allowed))
            report.record(f"element outside {sorted(allowed)}", "dropped", where, outside)
            keep[row] = False
            continue
        if raw.geometry is not None and _geometry_composition(raw, row) != p.composition:
            report.record("geometry formula differs from SMILES", "dropped", where, smiles)
            keep[row] = False
            continue
        if p.canonical in first_of:
            _record_duplicate(report, raw, first_of[p.canonical], row)
            keep[row] = False
            continue
        first_of[p.canonical] = row
        if p.n_fragments > 1:
            report.record("several fragments", "kept", where, p.canonical)
        n_changed += p.canonical != smiles
    if n_changed:
        report.findings["changed:canonical SMILES"] = Finding(
            "canonical SMILES", "changed", n_changed, ["rewritten in RDKit canonical form"]
        )
    rows = np.flatnonzero(keep)
    table = MoleculeTable(
        name=report.source,
        mol_id=raw.mol_id[rows],
        smiles=np.array([parsed[r].canonical for r in rows], dtype=str),
        targets={k: v[rows] for k, v in raw.targets.items()},
        geometry=None if raw.geometry is None else raw.geometry.take(rows),
    )
    report.n_kept = len(table)
    return table, report


def _record_duplicate(report: DataReport, raw: RawData, kept: int, row: int) -> None:
    """A dropped repeat of the structure at row `kept`: a plain duplicate, or one whose
    target values differ (NaN against a number included), shown side by side."""
    kept_id, mol_id = int(raw.mol_id[kept]), int(raw.mol_id[row])
    differences = [
        f"{column} {float(values[kept])!r} (mol {kept_id}) vs {float(values[row])!r} (mol {mol_id})"
        for column, values in raw.targets.items()
        if not _same_value(values[kept], values[row])
    ]
    where = f"mol {mol_id}"
    if differences:
        detail = f"same as mol {kept_id}; " + "; ".join(differences)
        report.record(DIFFERENT_TARGET, "dropped", where, detail)
    else:
        report.record("duplicate structure", "dropped", where, f"same as mol {kept_id}")


def _same_value(a: float, b: float) -> bool:
    return bool(a == b or (np.isnan(a) and np.isnan(b)))


def _geometry_composition(raw: RawData, row: int) -> tuple[tuple[int, int], ...]:
    numbers, _ = raw.geometry.molecule(row)
    return tuple(sorted(Counter(int(z) for z in numbers).items()))
