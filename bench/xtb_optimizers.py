"""GFN2-xTB geometry optimisers side by side on the same molecules of the CSD 10k set: the
library optimisers of `XTBOptimizer(optimizer=...)` and the hand-written Cartesian L-BFGS
they replaced (`lbfgs-cartesian`, tests/references/frozen/xtb_lbfgs_reference.py).

    python -m bench.xtb_optimizers [--molecules 200] [--seed 0] [--jobs 1]
        [--optimizers lbfgs-cartesian,ase-bfgs,geometric] [--out xtb-optimizers.jsonl]

The first of `--optimizers` is the baseline that the others are compared with. A name may
carry `XTBOptimizer` settings, each after a colon: `ase-bfgs:loose_accuracy=1` runs every
SCF at full accuracy.

The molecules are a seeded sample of csd10k_density's; each starts from its MMFF94
conformer as `graph3d` makes it, and the optimisers run one after the other on each
molecule, on one thread (so that a change in the machine's load hits them alike), after a
warm-up molecule in each process. Per optimiser the table gives the molecules optimised
and refused, the energy + gradient evaluations per molecule (mean, median), the CPU
seconds per molecule (mean, median) and the mean's speed-up over the baseline, and,
against the baseline's result for the same molecule: the median final energy
difference, how many final energies agree within 1e-5 Eh and how many lie lower or
higher, and the heavy-atom RMSD between the two geometries.

Two optimisers stopping more than 1e-5 Eh apart have either stopped at different depths
of one minimum's flat valley (the criteria allow a gradient of 1e-3 Eh/bohr along a soft
torsion) or in different minima: both stopping points are then relaxed further with tight
criteria (geomeTRIC; 1e-7 Eh, 1e-4 Eh/bohr), and "same minimum" counts the pairs whose
relaxed energies agree within 1e-5 Eh. That relaxation is not part of any timing.

Each molecule's results are appended to --out as they come (JSON lines); the same command
goes on where it stopped. The table is printed at the end.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from pathlib import Path

import numpy as np
from hydra.utils import instantiate
from rdkit import Chem

from oodmol.config import compose_config
from oodmol.data.featurize.conformers import Conformer, embed_mol
from oodmol.data.featurize.graph3d import Graph3D
from oodmol.data.featurize.tight_binding import load_tblite
from oodmol.data.featurize.xtb import HARTREE_KCAL, OptimizationError, XTBOptimizer
from oodmol.data.geometry_checks import aligned_rmsd
from oodmol.data.task import load_task

REPO = Path(__file__).resolve().parents[1]
LBFGS = "lbfgs-cartesian"
SAME_ENERGY = 1e-5  # Eh
SAME_GEOMETRY = 0.1  # Å, heavy-atom RMSD
TIGHT = {"energy_tolerance": 1e-7, "gradient_tolerance": 1e-4, "max_steps": 2000}


def optimizer(name: str):
    """The optimiser called `name`, with the settings after its colon (the L-BFGS is the
    frozen copy)."""
    if name == LBFGS:
        sys.path.insert(0, str(REPO / "tests" / "references" / "frozen"))
        from xtb_lbfgs_reference import LBFGSCartesianXTBOptimizer

        return LBFGSCartesianXTBOptimizer()
    kind, *settings = name.split(":")
    given = dict(pair.split("=", 1) for pair in settings)
    return XTBOptimizer(optimizer=kind, **{key: float(value) for key, value in given.items()})


def sample(n: int, seed: int) -> list[tuple[int, str]]:
    """`n` molecules of csd10k_density, drawn with `seed`: (mol_id, SMILES)."""
    cfg = compose_config("data", ["task=csd10k_density", "progress=false"])
    table = load_task(instantiate(cfg.task), Path(cfg.paths.data_dir), progress=False).dataset
    rows = np.sort(np.random.default_rng(seed).choice(len(table.mol_id), n, replace=False))
    return [(int(table.mol_id[i]), str(table.smiles[i])) for i in rows]


_optimizers: dict = {}  # in a worker, the first is the baseline


def _start_worker(names: list[str]) -> None:
    """One thread, the optimisers made, and each run once (imports, first SCF)."""
    load_tblite()  # loaded before any thread limit is set, on OpenBLAS where it can be

    _optimizers.update({name: optimizer(name) for name in names})
    mol, start = embed_mol("CCO")
    for run in _optimizers.values():
        run(mol, start)


def measure(molecule: tuple[int, str]) -> dict:
    """Every optimiser on one molecule, and the tight relaxations where they disagree."""
    mol_id, smiles = molecule
    graph3d = Graph3D()
    mol, start = embed_mol(smiles, graph3d.seed, graph3d.max_iterations, graph3d.embed_timeout)
    row: dict = {"mol_id": mol_id, "smiles": smiles, "atoms": mol.GetNumAtoms()}
    results = {}
    for name, run in _optimizers.items():
        began = time.process_time()
        try:
            out = run(mol, start)
        except OptimizationError as error:
            row[name] = {"refused": str(error), "seconds": time.process_time() - began}
            continue
        results[name] = out
        row[name] = {
            "seconds": time.process_time() - began,
            "steps": int(out["steps"][0]),
            "energy": float(out["energy"][1]),
            "gradient_norm": float(out["gradient_norm"][0]),
        }
    baseline = next(iter(_optimizers))
    if baseline in results:
        for name, out in results.items():
            if name != baseline:
                row[name] |= compare(mol, start, results[baseline], out, row)
    return row


def compare(mol: Chem.Mol, start: Conformer, base: dict, out: dict, row: dict) -> dict:
    """`out` against the baseline's `base`: energy difference, heavy-atom RMSD, and where
    they differ, the tight relaxations' energy difference."""
    heavy = start.atomic_numbers > 1
    found = {
        "energy_difference": float(out["energy"][1] - base["energy"][1]),
        "rmsd_heavy": aligned_rmsd(out["pos"][heavy], base["pos"][heavy]),
    }
    if abs(found["energy_difference"]) > SAME_ENERGY:
        if "tight_baseline" not in row:
            row["tight_baseline"] = relaxed(mol, start, base["pos"])
        tight = relaxed(mol, start, out["pos"])
        if tight is not None and row["tight_baseline"] is not None:
            found["tight_difference"] = tight - row["tight_baseline"]
    return found


def relaxed(mol: Chem.Mol, start: Conformer, positions: np.ndarray) -> float | None:
    """The energy at the minimum that geomeTRIC reaches from `positions` with tight
    criteria (None where it does not)."""
    conformer = Conformer(
        start.atomic_numbers, positions, start.method, start.converged, start.fragment
    )
    try:
        return float(XTBOptimizer(optimizer="geometric", **TIGHT)(mol, conformer)["energy"][1])
    except OptimizationError:
        return None


def table(rows: list[dict], names: list[str]) -> str:
    """The markdown table of `rows`."""
    header = (
        "| optimiser | optimised | refused | evaluations mean / median | CPU-s mean / median "
        "| speed-up | ΔE vs baseline median | ΔE vs baseline: within 1e-5 Eh / lower / higher "
        "| same minimum (tight) "
        "| heavy-atom RMSD median, ≤ 0.1 Å |"
    )
    lines = [header, "|" + "---|" * 10]
    baseline = names[0]
    base_seconds = np.mean([r[baseline]["seconds"] for r in rows if baseline in r])
    for name in names:
        done = [r[name] for r in rows if "steps" in r.get(name, {})]
        refused = sum("refused" in r.get(name, {}) for r in rows)
        steps = np.array([d["steps"] for d in done])
        seconds = np.array([r[name]["seconds"] for r in rows if name in r])
        cells = [
            f"`{name}`",
            str(len(done)),
            str(refused),
            f"{steps.mean():.1f} / {np.median(steps):.0f}",
            f"{seconds.mean():.2f} / {np.median(seconds):.2f}",
            f"{base_seconds / seconds.mean():.2f}x",
        ]
        compared = [d for d in done if "energy_difference" in d]
        if compared:
            de = np.array([d["energy_difference"] for d in compared])
            differ = [d for d in compared if abs(d["energy_difference"]) > SAME_ENERGY]
            same = sum(abs(d.get("tight_difference", np.inf)) <= SAME_ENERGY for d in differ)
            rmsd = np.array([d["rmsd_heavy"] for d in compared])
            cells += [
                f"{np.median(de) * HARTREE_KCAL:+.3f} kcal/mol",
                f"{np.sum(np.abs(de) <= SAME_ENERGY)} / {np.sum(de < -SAME_ENERGY)} / "
                f"{np.sum(de > SAME_ENERGY)}",
                f"{same} of {len(differ)}",
                f"{np.median(rmsd):.3f} Å, {np.sum(rmsd <= SAME_GEOMETRY)}",
            ]
        else:
            cells += ["(baseline)", "", "", ""]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--molecules", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument(
        "--optimizers",
        default=f"{LBFGS},ase-bfgs,geometric",
        help="the first is the baseline; settings after colons: ase-bfgs:loose_accuracy=1",
    )
    parser.add_argument("--out", type=Path, default=Path("xtb-optimizers.jsonl"))
    args = parser.parse_args()
    names = args.optimizers.split(",")
    for name in names:
        try:
            optimizer(name)  # an unknown name or setting fails here, in one line
        except (ValueError, TypeError) as error:
            parser.error(f"--optimizers {name}: {error}")
    molecules = sample(args.molecules, args.seed)
    done = []
    if args.out.exists():
        done = [json.loads(line) for line in args.out.read_text().splitlines() if line]
        done = [r for r in done if all(name in r for name in names)]
    finished = {r["mol_id"] for r in done}
    todo = [m for m in molecules if m[0] not in finished]
    print(f"{len(molecules)} molecules (seed {args.seed}), {len(todo)} to measure", flush=True)
    context = multiprocessing.get_context("fork")
    with (
        context.Pool(args.jobs, _start_worker, (names,)) as pool,
        args.out.open("a") as out,
    ):
        for i, row in enumerate(pool.imap_unordered(measure, todo), 1):
            out.write(json.dumps(row) + "\n")
            out.flush()
            done.append(row)
            times = ", ".join(
                f"{n} {row[n].get('steps', 'refused')}/{row[n]['seconds']:.1f}s" for n in names
            )
            print(f"[{i}/{len(todo)}] {row['mol_id']} ({row['atoms']} atoms): {times}", flush=True)
    rows = [r for r in done if r["mol_id"] in {m[0] for m in molecules}]
    atoms = np.array([r["atoms"] for r in rows])
    print(
        f"\n{len(rows)} molecules of csd10k_density (seed {args.seed}), {atoms.min()}-"
        f"{atoms.max()} atoms (mean {atoms.mean():.1f}), from MMFF94; one thread\n"
    )
    print(table(rows, names))


if __name__ == "__main__":
    main()
