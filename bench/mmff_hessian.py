"""The physics estimates' MMFF94 Hessian: one force field for every displacement
(`oodmol.data.featurize.physics.mmff_hessian`) against a field built per displacement
(the earlier way, tests/references/frozen/mmff_hessian_reference.py), side by side on the
same molecules, with the two Hessians checked equal.

    python -m bench.mmff_hessian [--molecules 30] [--seed 0] [--tasks qm9_homo,csd10k_density]

Each molecule is prepared as the featuriser prepares it (its geometry, from the QM9 table
or an ETKDG + MMFF94 conformer; fragments set apart; the MMFF94 minimum nearest it), then
each Hessian is timed on one thread. Columns: milliseconds per molecule (median, mean) of
each, the ratio of the means, and how many Hessians are bit-for-bit equal.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from hydra.utils import instantiate
from rdkit import Chem
from threadpoolctl import threadpool_limits

from oodmol.config import compose_config
from oodmol.data.featurize.base import FeaturizationError, inputs_of
from oodmol.data.featurize.graph3d import Graph3D
from oodmol.data.featurize.physics import mmff_hessian, mmff_minimum, placed_molecule
from oodmol.data.task import load_task

REPO = Path(__file__).resolve().parents[1]
STEP = 0.002  # Å, the featuriser's hessian_step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--molecules", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tasks", default="qm9_homo,csd10k_density")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "tests" / "references" / "frozen"))
    from mmff_hessian_reference import field_per_displacement_hessian

    data_dir = Path(os.environ.get("OODMOL_DATA_DIR", "data"))
    print("| data set (task) | molecules | atoms, mean | one field: median / mean ms "
          "| a field per displacement: median / mean ms | speed-up (means) | equal |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for task in args.tasks.split(","):
        cfg = compose_config("train", [f"task={task}"])
        table = load_task(instantiate(cfg.task), data_dir, progress=False).dataset
        rows = np.random.default_rng(args.seed).choice(len(table), args.molecules, replace=False)
        times: dict[str, list[float]] = {"one": [], "per": []}
        atoms, equal = [], 0
        geometry = Graph3D()
        with threadpool_limits(limits=1):
            for mol_input in inputs_of(table, rows):
                try:
                    arrays = geometry(mol_input)
                    parsed = Chem.MolFromSmiles(mol_input.smiles)
                    charge = Chem.GetFormalCharge(parsed)
                    pos = arrays["pos"].astype(float)
                    mol, _ = placed_molecule(parsed, arrays["z"], pos, charge)
                    field, properties, x0 = mmff_minimum(mol)  # as `vibrations` finds it
                except FeaturizationError:
                    continue
                began = time.perf_counter()
                fast = mmff_hessian(field, x0, STEP)
                times["one"].append(time.perf_counter() - began)
                began = time.perf_counter()
                slow = field_per_displacement_hessian(mol, properties, x0, STEP)
                times["per"].append(time.perf_counter() - began)
                equal += bool(np.array_equal(fast, slow))
                atoms.append(len(x0) // 3)
        one, per = (np.array(times[k]) * 1e3 for k in ("one", "per"))
        print(
            f"| {table.name} ({task}) | {len(one)} | {statistics.fmean(atoms):.1f} "
            f"| {np.median(one):.2f} / {one.mean():.2f} | {np.median(per):.2f} / {per.mean():.2f} "
            f"| {per.mean() / one.mean():.1f}x | {equal} of {len(one)} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
