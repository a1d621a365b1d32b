"""What each representation costs per molecule, on one core, on a random sample of each
data set: the price of a row of the extrapolation table (docs/benchmarks/extrapolation.md).

    python -m bench.featurize_cost [--molecules 30] [--seed 0]
        [--tasks qm9_homo,csd10k_density,lipophilicity]
        [--representations descriptors,physics,soap]

Each representation is built from its config as a run builds it (the task's own settings,
e.g. its ALPB solvents) and called molecule by molecule in this process with one thread;
a representation read from a geometry (physics, SOAP) is timed on that geometry, and the
geometry's own cost is a row of its own (graph3d: QM9's DFT geometry is read, the other
sets' ETKDG + MMFF94 conformer is made). Columns: seconds per molecule (median, mean,
max), refused molecules, and the core-hours of the whole data set at the mean. The first
molecule of each is timed apart (imports, tblite's setup) and left out.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np
from hydra.utils import instantiate
from threadpoolctl import threadpool_limits

from oodmol.config import compose_config
from oodmol.data.featurize.base import FeaturizationError, Featurizer, MolInput, inputs_of
from oodmol.data.task import load_task


def timed(featurizer: Featurizer, inputs: list[MolInput]) -> tuple[list[float], int, list]:
    """Seconds per molecule of `featurizer` on `inputs`, the count it refused, and its
    outputs (None where refused)."""
    seconds, refused, outputs = [], 0, []
    for mol in inputs:
        start = time.perf_counter()
        try:
            outputs.append(featurizer(mol))
        except FeaturizationError:
            outputs.append(None)
            refused += 1
        seconds.append(time.perf_counter() - start)
    return seconds, refused, outputs


def row(task: str, name: str, seconds: list[float], refused: int, n_set: int) -> str:
    kept = seconds[1:]  # the first call pays for imports and setup
    mean = statistics.fmean(kept)
    return (
        f"| {task} | {name} | {statistics.median(kept):.4f} | {mean:.4f} | {max(kept):.4f} "
        f"| {refused} | {mean * n_set / 3600:.2f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--molecules", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tasks", default="qm9_homo,csd10k_density,lipophilicity")
    parser.add_argument("--representations", default="descriptors,physics,soap")
    args = parser.parse_args()
    data_dir = Path(os.environ.get("OODMOL_DATA_DIR", "data"))
    print(
        "| data set (task) | representation | median s | mean s | max s | refused "
        "| core-hours, whole set |"
    )
    print("|---|---|---|---|---|---|---|")
    for task in args.tasks.split(","):
        cfg = compose_config("train", [f"task={task}"])
        data = load_task(instantiate(cfg.task), data_dir, progress=False)
        table = data.dataset
        rows = np.random.default_rng(args.seed).choice(
            len(table), size=min(args.molecules + 1, len(table)), replace=False
        )
        inputs = inputs_of(table, rows)
        geometries: dict[str, list] = {}
        for name in args.representations.split(","):
            model = compose_config(
                "train", [f"task={task}", "model=ridge", f"model/representation={name}"]
            )
            featurizer = instantiate(model.model.representation.featurizer)
            with threadpool_limits(limits=1):
                source = featurizer.built_on()
                if source is None:
                    seconds, refused, _ = timed(featurizer, inputs)
                else:
                    if source.name not in geometries:
                        built = timed(source, inputs)
                        geometries[source.name] = built[2]
                        print(row(task, source.name, built[0], built[1], len(table)), flush=True)
                    shown = [
                        featurizer.input_from(m.smiles, arrays, None if arrays else "refused")
                        for m, arrays in zip(inputs, geometries[source.name], strict=True)
                    ]
                    seconds, refused, _ = timed(featurizer, shown)
            print(row(task, name, seconds, refused, len(table)), flush=True)


if __name__ == "__main__":
    main()
