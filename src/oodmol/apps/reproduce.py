"""The runs of BOOM's table under `protocol=boom` and `protocol=default`: planned, found
below a runs folder by their configuration key, the missing ones trained: the work of
`oodmol reproduce` (`oodmol.cli.reproduce`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from oodmol.config import benchmark_tasks, compose_config
from oodmol.identity import config_key
from oodmol.report.collect import collect_runs
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
