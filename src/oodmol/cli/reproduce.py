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
from pathlib import Path

from oodmol.apps.reproduce import (
    MODELS,
    QM9_MODELS,
    TASKS,
    TASKS_3D,
    matched_runs,
    plan,
    train,
)
from oodmol.cli.entry import ToolParser, entry_point
from oodmol.errors import InputError
from oodmol.report.reproduction import PaperTables, reproduction_table, to_markdown


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
