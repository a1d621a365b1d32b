"""The GFN2-xTB geometry optimiser on the BLAS tblite's wheel bundles (netlib's reference)
and on scipy's OpenBLAS (`oodmol.data.featurize.tight_binding`), side by side on the
same molecules of the CSD 10k set.

    python -m bench.xtb_blas [--molecules 40] [--seed 0] [--optimizer ase-bfgs]

Two processes, one per BLAS, started together (one core each), optimise the same seeded
sample one molecule after the other from the MMFF94 conformers `graph3d` makes, on one
thread each. Printed: per BLAS the molecules optimised, evaluations and CPU seconds per
molecule (mean, median), the speed-up of the mean, and the largest difference between
the two final energies and geometries (heavy-atom RMSD).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time

import numpy as np

from bench.xtb_optimizers import sample
from oodmol.data.featurize.xtb import XTBOptimizer

BLAS = {"reference": "reference", "openblas": ""}  # name: OODMOL_XTB_BLAS


def optimise_all(blas: str, optimizer: str, molecules: list, queue) -> None:
    """One worker: every molecule with one BLAS; (BLAS, what ran, results) to `queue`."""
    os.environ["OODMOL_XTB_BLAS"] = BLAS[blas]
    from oodmol.data.featurize.conformers import embed_mol
    from oodmol.data.featurize.graph3d import Graph3D
    from oodmol.data.featurize.tight_binding import blas as what_ran
    from oodmol.data.featurize.xtb import OptimizationError, XTBOptimizer

    run = XTBOptimizer(optimizer=optimizer)
    run(*embed_mol("CCO"))  # warm-up: imports, first SCF
    graph3d = Graph3D()
    results = {}
    for mol_id, smiles in molecules:
        mol, start = embed_mol(smiles, graph3d.seed, graph3d.max_iterations, graph3d.embed_timeout)
        began = time.process_time()
        try:
            out = run(mol, start)
        except OptimizationError as error:
            results[mol_id] = {"refused": str(error)}
            continue
        results[mol_id] = {
            "seconds": time.process_time() - began,
            "steps": int(out["steps"][0]),
            "energy": float(out["energy"][1]),
            "pos": out["pos"][start.atomic_numbers > 1],
        }
    queue.put((blas, what_ran(), results))


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--molecules", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--optimizer", default="ase-bfgs")
    args = parser.parse_args()
    try:  # here, in one line, not in a worker the table would wait for
        XTBOptimizer(optimizer=args.optimizer)
    except ValueError as error:
        parser.error(str(error))
    molecules = sample(args.molecules, args.seed)
    context = multiprocessing.get_context("spawn")  # each chooses its BLAS before tblite
    queue = context.Queue()
    workers = [
        context.Process(target=optimise_all, args=(blas, args.optimizer, molecules, queue))
        for blas in BLAS
    ]
    for worker in workers:
        worker.start()
    found = {}
    for _ in workers:
        blas, what_ran, results = queue.get()
        found[blas] = results
        print(f"{blas}: {what_ran}")
    for worker in workers:
        worker.join()
    print(table(found))


def table(found: dict[str, dict]) -> str:
    from oodmol.data.featurize.xtb import HARTREE_KCAL
    from oodmol.data.geometry_checks import aligned_rmsd

    both = [
        m
        for m in found["reference"]
        if "seconds" in found["reference"][m] and "seconds" in found["openblas"].get(m, {})
    ]
    lines = [
        "| BLAS | optimised | evaluations mean / median | CPU-s mean / median | speed-up |",
        "|---|---|---|---|---|",
    ]
    baseline = np.mean([found["reference"][m]["seconds"] for m in both])
    for blas in BLAS:
        results = found[blas]
        done = [results[m] for m in both]
        steps = np.array([r["steps"] for r in done])
        seconds = np.array([r["seconds"] for r in done])
        lines.append(
            f"| {blas} | {len(done)} of {len(results)} | {steps.mean():.1f} / "
            f"{np.median(steps):.0f} | {seconds.mean():.2f} / {np.median(seconds):.2f} | "
            f"{baseline / seconds.mean():.2f}x |"
        )
    energy = max(
        abs(found["openblas"][m]["energy"] - found["reference"][m]["energy"]) for m in both
    )
    rmsd = max(
        aligned_rmsd(found["openblas"][m]["pos"], found["reference"][m]["pos"]) for m in both
    )
    lines.append(
        f"\nLargest difference between the two: energy {energy * HARTREE_KCAL:.2e} kcal/mol, "
        f"heavy-atom RMSD {rmsd:.2e} Å ({len(both)} molecules)"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
