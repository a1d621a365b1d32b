"""oodmol reproduce: BOOM's numbers beside ours under `protocol=boom` and `protocol=default`.

For every model, task, protocol and seed asked for, the run is looked up below the runs
folder by its configuration key (the model's, task's and protocol's own settings: a run
with other hyperparameters, a subset or a shortened budget never stands in for it) and
reused; `--run` trains the missing ones there, one after the other, through train.py
(`resume=true`: a run that was killed or pre-empted goes on from its last.ckpt).
QM9's eight tasks (130k molecules) are run by the models a CPU trains on them in
reasonable time (`--qm9-models`: the forest and the MLP), 3D models on the 10k tasks
only and with their own (smaller) seed count, which keeps the table within a CPU's
budget.

    oodmol reproduce runs/repro --run --out runs/repro/table
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from oodmol.command_line import ToolParser, entry_point
from oodmol.config import benchmark_tasks, compose_config
from oodmol.errors import InputError
from oodmol.identity import config_key
from oodmol.report.collect import collect_runs
from oodmol.report.reproduction import PaperTables, reproduction_table, to_markdown
from oodmol.training.child import run_train

MODELS = ("rf", "mlp", "chemprop", "tgnn", "ignn", "egnn")
TASKS = tuple(benchmark_tasks("boom"))
QM9_TASKS = frozenset(benchmark_tasks("boom", "qm9"))
QM9_MODELS = ("rf", "mlp")  # the others train too slowly on QM9's 130k molecules on a CPU
TASKS_3D = tuple(benchmark_tasks("boom", "csd10k"))
POINT_CLOUD = "oodmol.data.features.PointCloudFeatures"


@dataclass(frozen=True)
class Cell:
    """One training run the table needs: its command line, and the task name and
    configuration key its metrics.json must record."""

    model: str
    task: str
    protocol: str
    seed: int
    task_name: str
    key: str
    extra: tuple[str, ...] = ()

    def overrides(self) -> list[str]:
        return [
            f"model={self.model}",
            f"task={self.task}",
            "split=ood",
            f"protocol={self.protocol}",
            f"seed={self.seed}",
            *self.extra,
        ]


def plan(
    models: list[str],
    tasks: list[str],
    tasks_3d: list[str],
    seeds: list[int],
    seeds_3d: list[int],
    protocols: list[str],
    extra: Sequence[str] = (),
    qm9_models: Sequence[str] = QM9_MODELS,
) -> list[Cell]:
    """Every run the table needs; a model on point clouds gets `tasks_3d` and `seeds_3d`,
    and QM9's tasks of `tasks` go to `qm9_models` only. `extra` overrides go to every
    run, and into the configuration key it must have."""
    cells = []
    for model in models:
        for protocol in protocols:
            probe = compose_config("train", [f"model={model}", f"protocol={protocol}"])
            three_d = probe.model.features.get("_target_") == POINT_CLOUD
            own = [t for t in tasks if model in qm9_models or t not in QM9_TASKS]
            for task in tasks_3d if three_d else own:
                base = Cell(model, task, protocol, 0, "", "", tuple(extra))
                cfg = compose_config("train", base.overrides())
                cells += [
                    replace(base, seed=seed, task_name=cfg.task.name, key=config_key(cfg))
                    for seed in (seeds_3d if three_d else seeds)
                ]
    return cells


def matched_runs(runs_dir: Path, cells: list[Cell]) -> tuple[pd.DataFrame, list[Cell]]:
    """The runs below `runs_dir` that are cells of the plan (first found per cell, in
    sorted path order), with a `protocol` column; and the cells with no run."""
    runs = collect_runs(runs_dir).runs if runs_dir.is_dir() else pd.DataFrame()
    wanted = {(c.model, c.task_name, c.key, c.seed): c for c in cells}
    found: dict[Cell, int] = {}
    if not runs.empty:
        for index, run in runs.iterrows():
            cell = wanted.get((run["model_name"], run["task"], run.get("config_key"), run["seed"]))
            if cell is not None and run["split"] == "ood" and cell not in found:
                found[cell] = index
    matched = runs.loc[list(found.values())].copy() if found else pd.DataFrame()
    if found:
        matched["protocol"] = [cell.protocol for cell in found]
    return matched, [c for c in cells if c not in found]


def train(cell: Cell, runs_dir: Path) -> int:
    """Train one missing cell into the runs folder, or finish its interrupted run (the
    cell's folder is named by its configuration key: it holds no other run); its exit
    status."""
    print(f"training {' '.join(cell.overrides())}", flush=True)
    location = [f"paths.log_dir={runs_dir.resolve()}", "progress=False", "resume=true"]
    return run_train([*cell.overrides(), *location])


def _list(text: str, kind: type = str) -> list:
    return [kind(item) for item in text.split(",") if item]


@entry_point("oodmol reproduce")
def main(argv: list[str]) -> int:
    parser = ToolParser(prog="oodmol reproduce", description=__doc__)
    parser.add_argument("runs_dir", type=Path, help="folder of runs (searched recursively)")
    parser.add_argument("--out", type=Path, help="folder for reproduction.md and .csv")
    parser.add_argument("--run", action="store_true", help="train the missing runs")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--tasks-3d", default=",".join(TASKS_3D))
    parser.add_argument(
        "--qm9-models", default=",".join(QM9_MODELS), help="the models run on QM9's tasks"
    )
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--seeds-3d", default="0")
    parser.add_argument("--protocols", default="boom,default")
    parser.add_argument(
        "train_overrides", nargs="*", help="passed to every training run (part of its key)"
    )
    args = parser.parse_intermixed_args(argv)

    cells = plan(
        _list(args.models),
        _list(args.tasks),
        _list(args.tasks_3d),
        _list(args.seeds, int),
        _list(args.seeds_3d, int),
        _list(args.protocols),
        args.train_overrides,
        _list(args.qm9_models),
    )
    runs, missing = matched_runs(args.runs_dir, cells)
    print(f"{len(cells)} runs planned: {len(cells) - len(missing)} found, {len(missing)} missing")
    if args.run and missing:
        failed = [c for c in missing if train(c, args.runs_dir) != 0]
        for cell in failed:
            print(f"failed: {' '.join(cell.overrides())}", file=sys.stderr)
        runs, missing = matched_runs(args.runs_dir, cells)
    for cell in missing:
        print(f"missing: {' '.join(cell.overrides())}", file=sys.stderr)
    if runs.empty:
        raise InputError(
            f"{args.runs_dir}: no run of the plan found (train them with --run, or point at "
            "the folder that holds them)"
        )
    table = reproduction_table(runs, PaperTables.shipped())
    markdown = to_markdown(table)
    print(markdown)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.out / "reproduction.csv", index=False)
        (args.out / "reproduction.md").write_text(markdown)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
