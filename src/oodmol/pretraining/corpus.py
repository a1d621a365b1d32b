"""The molecules `oodmol pretrain` reads: a SMILES file or the training molecules of
tasks, never a test molecule.

A molecule is compared by its structure: RDKit's canonical SMILES without stereo and
isotope marks, so a test molecule written with other stereo is removed too. The test
molecules are the ID and OOD test sets of every task named (the corpus's own tasks and
`exclude`) under the given split; a task corpus contributes its training and validation
molecules, and those of them that are another named task's test molecules are removed
as well (one QM9 property's training set holds another's OOD tail).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from hydra.utils import instantiate

from oodmol.config import compose_config
from oodmol.data.task import load_split, load_task
from oodmol.data.tokens import non_isomeric
from oodmol.data.validate import parse_all

TEST_SETS = ("id", "ood")
TRAINING_SETS = ("train", "val")
SHOWN = 5  # invalid SMILES named in the report


@dataclass
class Corpus:
    """Canonical SMILES, each structure once, and how they were arrived at."""

    smiles: list[str]
    report: dict = field(default_factory=dict)


def read_smiles_file(path: Path, column: str = "smiles") -> list[str]:
    """The SMILES of a CSV file (its `column`) or of a text file (the first field of
    each non-empty line, as .smi files have it)."""
    if path.suffix.lower() == ".csv":
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        if column not in frame:
            raise ValueError(f"corpus={path}: no {column!r} column (columns: {list(frame)})")
        return frame[column].tolist()
    lines = path.read_text().splitlines()
    return [line.split()[0] for line in lines if line.strip()]


def canonical_smiles(raw: Sequence[str], progress: bool = False) -> tuple[list[str], dict]:
    """The valid SMILES of `raw`, canonical, in order; the count and first examples
    (position, SMILES, reason) of the invalid ones."""
    parsed = parse_all(list(raw), progress)
    valid = [p.canonical for p in parsed if p.canonical is not None]
    invalid = [
        (i, s, p.error)
        for i, (s, p) in enumerate(zip(raw, parsed, strict=True))
        if p.canonical is None
    ]
    examples = [{"position": i, "smiles": s, "error": e} for i, s, e in invalid[:SHOWN]]
    return valid, {"invalid": len(invalid), "invalid_examples": examples}


def task_sets(name: str, split: str, data_dir: Path, progress: bool) -> dict[str, list[str]]:
    """Canonical SMILES of each set (train, val, id, ood) of task `name` under `split`:
    the persisted split every training run of that task uses."""
    cfg = compose_config("data", [f"task={name}", f"split={split}", f"progress={progress}"])
    data = load_task(instantiate(cfg.task), data_dir, progress)
    assignment = load_split(data, instantiate(cfg.split), data_dir)
    table = data.table
    return {s: table.smiles[table.rows_of(ids)].tolist() for s, ids in assignment.sets.items()}


def structure(canonical: str) -> str:
    """What two molecules are compared by: canonical SMILES without stereo and isotopes."""
    return non_isomeric(canonical)


def remove_test_molecules(smiles: list[str], tests: dict[str, list[str]]) -> tuple[list[str], dict]:
    """`smiles` less repeated structures and every structure that is a test molecule
    of a task in `tests` (task → its ID and OOD SMILES); the counts: `duplicates`,
    `removed_test_molecules` (distinct structures) and `removed_by_task` (a structure
    in several tasks' test sets counts for each)."""
    test_structures = {task: {structure(s) for s in test} for task, test in tests.items()}
    kept, seen = [], set()
    removed = dict.fromkeys(tests, 0)
    duplicates = removed_total = 0
    for s in smiles:
        key = structure(s)
        if key in seen:
            duplicates += 1
            continue
        seen.add(key)
        hits = [task for task, keys in test_structures.items() if key in keys]
        for task in hits:
            removed[task] += 1
        removed_total += bool(hits)
        if not hits:
            kept.append(s)
    counts = {
        "duplicates": duplicates,
        "removed_test_molecules": removed_total,
        "removed_by_task": removed,
    }
    return kept, counts


def build_corpus(
    corpus: str | Sequence[str],
    exclude: Sequence[str],
    split: str,
    data_dir: Path,
    smiles_column: str = "smiles",
    progress: bool = False,
) -> Corpus:
    """The pretraining molecules of `corpus` (a SMILES file, or task names) less the
    test molecules of the corpus's tasks and of `exclude`'s, under `split`."""
    tasks = [] if isinstance(corpus, str) else list(corpus)
    report: dict = {"split": split}
    if tasks:
        sets = {name: task_sets(name, split, data_dir, progress) for name in tasks}
        raw = [s for name in tasks for part in TRAINING_SETS for s in sets[name][part]]
        report |= {"tasks": tasks, "read": len(raw), "invalid": 0, "invalid_examples": []}
        valid = raw  # task tables are validated and canonical already
    else:
        path = Path(corpus)
        raw = read_smiles_file(path, smiles_column)
        valid, invalid = canonical_smiles(raw, progress)
        sets = {}
        report |= {"file": str(path), "read": len(raw), **invalid}
    excluded = list(dict.fromkeys([*tasks, *exclude]))
    for name in excluded:
        if name not in sets:
            sets[name] = task_sets(name, split, data_dir, progress)
    tests = {name: [s for part in TEST_SETS for s in sets[name][part]] for name in excluded}
    kept, counts = remove_test_molecules(valid, tests)
    report |= {"excluded_tasks": excluded, **counts, "molecules": len(kept)}
    return Corpus(kept, report)


def holdout_split(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the training and held-out molecules: a seeded `fraction` of `n`
    (at least one when there are two or more, none of one molecule)."""
    if not 0 <= fraction < 1:
        raise ValueError(f"holdout={fraction} must lie in [0, 1)")
    order = np.random.default_rng(seed).permutation(n)
    held = round(fraction * n) or int(fraction > 0 and n > 1)
    held = max(min(held, n - 1), 0)
    return np.sort(order[held:]), np.sort(order[:held])
