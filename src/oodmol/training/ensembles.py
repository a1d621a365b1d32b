"""Combining ensemble members from their files, so that members trained in one run and
members trained as separate (multirun, cluster) jobs end in the same result files.

A member folder holds a normal run's metrics.json (with `uq.member`) and predictions.csv
(ID, OOD and validation rows, with σ columns where the member has them).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from oodmol.comparability import ordered
from oodmol.errors import UserError
from oodmol.predictions import SetPredictions, read_predictions_file, std_columns
from oodmol.run_record import RunRecord, iter_runs, read_record
from oodmol.scoring.results import write_results
from oodmol.uq.mixture import mixture
from oodmol.uq.seeds import run_seed

SET_ORDER = ("id", "ood", "val")
# identity fields every member of one run shares
SHARED = ("task", "split", "split_hash", "model", "config_key")


class MemberError(UserError, ValueError):
    """The member folders do not form one ensemble."""


def find_members(folder: str | Path) -> list[Path]:
    """Member folders below `folder`: those whose metrics.json names a member index,
    ordered by that index."""
    if not Path(folder).is_dir():
        raise MemberError(f"{folder}: no such folder of ensemble members")
    found = sorted((r.member, r.folder) for r in iter_runs(folder, kind="members"))
    if not found:
        raise MemberError(f"no ensemble member (metrics.json with uq.member) below {folder}")
    return [path for _, path in found]


def _variances(frame: pd.DataFrame) -> tuple[np.ndarray | None, np.ndarray | None]:
    """A member's variance components; a lone y_std (no component columns, e.g. from
    another code base) counts as the member's own aleatoric spread."""
    epistemic = frame["y_std_epistemic"] ** 2 if "y_std_epistemic" in frame else None
    aleatoric = frame["y_std_aleatoric"] ** 2 if "y_std_aleatoric" in frame else None
    if epistemic is None and aleatoric is None and "y_std" in frame:
        aleatoric = frame["y_std"] ** 2
    return (
        None if epistemic is None else epistemic.to_numpy(float),
        None if aleatoric is None else aleatoric.to_numpy(float),
    )


def _stacked(values: list[np.ndarray | None], what: str) -> np.ndarray | None:
    present = [v is not None for v in values]
    if not any(present):
        return None
    if not all(present):
        raise MemberError(f"only some members have {what} variances")
    return np.stack(values)


def _run_header(headers: list[dict], member_dirs: list[Path]) -> dict:
    """The combined run's header: shared identity, summed size and time, and the run's
    seed (recovered from each member's seed, so it must agree across members)."""
    first = headers[0]
    for field in SHARED:
        values = {h.get(field) for h in headers}
        if len(values) > 1:
            raise MemberError(f"members differ in {field}: {sorted(map(str, values))}")
    seeds = {run_seed(h["seed"], h["uq"]["member"]) for h in headers}
    if len(seeds) > 1:
        raise MemberError(f"members come from runs with different seeds: {sorted(seeds)}")
    indices = [h["uq"]["member"] for h in headers]
    if len(set(indices)) < len(indices):
        raise MemberError(f"a member index appears twice: {indices}")
    seconds = [h.get("train_seconds") for h in headers]
    return {
        **{field: first.get(field) for field in SHARED},
        "status": "complete",
        "seed": seeds.pop(),
        "flags": ordered(flag for h in headers for flag in h.get("flags", [])),
        "n_params": int(sum(h.get("n_params") or 0 for h in headers)),
        "train_seconds": None if None in seconds else float(sum(seconds)),
        "property": first.get("property", first["task"]),
        "units": first.get("units", ""),
        "data": first.get("data"),
        "uq": {
            "method": first["uq"].get("method", "ensemble"),
            "members": len(headers),
            "member_seeds": [h["seed"] for h in headers],
            "member_dirs": [str(d) for d in member_dirs],
        },
    }


def combine_members(
    member_dirs: list[Path],
    out_dir: str | Path,
    calibrators: Sequence[str] | None = None,
    evaluators: Sequence[str] | None = None,
) -> dict:
    """Combine the members' predictions (see `mixture`) and write the run's result files
    into `out_dir`, with the named uncertainty recalibrations and metrics (None: all);
    returns its metrics."""
    member_dirs = [Path(d) for d in member_dirs]
    headers = [read_record(d).to_json() for d in member_dirs]
    frames = [read_predictions_file(d) for d in member_dirs]
    key = ["set", "mol_id"]
    reference = frames[0][key]
    for d, frame in zip(member_dirs, frames, strict=True):
        if len(frame) != len(reference) or not frame[key].equals(reference):
            raise MemberError(
                f"{d} predicts other molecules (or in another order) than {member_dirs[0]}"
            )
    variances = [_variances(f) for f in frames]
    mean, epistemic, aleatoric = mixture(
        np.stack([f["y_pred"].to_numpy(float) for f in frames]),
        _stacked([v[0] for v in variances], "epistemic"),
        _stacked([v[1] for v in variances], "aleatoric"),
    )
    stds = std_columns(epistemic, aleatoric)
    rows = frames[0]
    sets = {}
    for name in SET_ORDER:
        mask = (rows["set"] == name).to_numpy()
        if mask.any():
            sets[name] = SetPredictions(
                name,
                rows["mol_id"].to_numpy()[mask],
                rows["smiles"].to_numpy()[mask],
                rows["y_true"].to_numpy(float)[mask],
                mean[mask],
                **{k: None if v is None else v[mask] for k, v in stds.items()},
            )
    header = _run_header(headers, member_dirs)
    record, _ = write_results(
        Path(out_dir),
        sets,
        RunRecord.of(header),
        headers[0]["train_median"],
        header["property"],
        header["units"],
        calibrators=calibrators,
        evaluators=evaluators,
        train_range=headers[0].get("train_range"),  # members recorded before it: none
    )
    return record.to_json()
