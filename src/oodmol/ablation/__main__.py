"""oodmol ablation: BOOM's ablations, from runs to figures (CSV, PNG and SVG).

oodmol ablation transfer <runs> --out <dir>        Fig. 5: pretraining transfer
oodmol ablation augmentation <runs> --out <dir>    Fig. 7: OOD data augmentation
oodmol ablation selection <runs> --out <dir>       a search's draws selected by ID
                                                   validation, tail validation, OOD test
oodmol ablation learning-curve <runs> --out <dir>  ID and OOD RMSE against training size
oodmol ablation geometry <runs> --out <dir> [--changes <csv>]
                                                   3D models on MMFF94 against GFN2-xTB
                                                   geometries (experiment=geometry)
oodmol ablation benchml <runs> --out <dir> [--boom-tables <dir>] [--similarity-regressor krr_rbf]
                                                   BenchML's representations × regressors:
                                                   RMSE, OOD/ID, learning curves, similarity
oodmol ablation transfer-run <runs> [--properties alpha,cv,...] [--task 'task=qm9_{p}']
                             [--seeds 0] [--freeze message_passing] [overrides ...]
                                                   train the transfer study's runs
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from oodmol.ablation.augmentation import augmentation_figure, augmentation_rows, augmentation_table
from oodmol.ablation.benchml import SIMILARITY_REGRESSOR, write_benchml
from oodmol.ablation.geometry import (
    geometry_figure,
    geometry_rows,
    geometry_table,
    molecule_changes,
    ranking_answer,
)
from oodmol.ablation.learning_curve import (
    learning_curve_figure,
    learning_curve_rows,
    learning_curve_table,
)
from oodmol.ablation.runs import complete_runs
from oodmol.ablation.selection import selection_figure, selection_rows, selection_table
from oodmol.ablation.transfer import data_correlation, transfer_figure, transfer_table
from oodmol.ablation.transfer_runs import plan, run_study
from oodmol.command_line import ToolParser, entry_point
from oodmol.figures import write_outputs

QM9 = "alpha,cv,gap,homo,lumo,mu,r2,zpve"


def _parser() -> ToolParser:
    parser = ToolParser(prog="oodmol ablation", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("transfer", "augmentation", "selection", "learning-curve", "geometry"):
        figure = commands.add_parser(name, help=f"the {name} figure of a folder of runs")
        figure.add_argument("runs", type=Path, help="folder searched for metrics.json")
        figure.add_argument("--out", type=Path, required=True, help="folder for CSV/PNG/SVG")
        if name == "transfer":
            figure.add_argument(
                "--data-dir",
                type=Path,
                default=Path(os.environ.get("OODMOL_DATA_DIR", "data")),
                help="data caches, for the properties' correlation ($OODMOL_DATA_DIR)",
            )
        if name == "geometry":
            figure.add_argument(
                "--changes",
                type=Path,
                default=None,
                help="a geometry report's CSV (python -m oodmol.data geometry conformers=xtb): "
                "per-molecule error change against RMSD and energy change",
            )
    benchml = commands.add_parser("benchml", help="BenchML's figures of a folder of runs")
    benchml.add_argument("runs", type=Path, help="folder searched for metrics.json")
    benchml.add_argument("--out", type=Path, required=True, help="folder for CSV/PNG/SVG")
    benchml.add_argument(
        "--boom-tables",
        type=Path,
        default=None,
        help="BOOM's published tables as CSV (table7_rmse.csv, table9_lipophilicity_rmse.csv)",
    )
    benchml.add_argument(
        "--similarity-regressor",
        default=SIMILARITY_REGRESSOR,
        help=f"the regressor whose OOD errors are correlated (default {SIMILARITY_REGRESSOR})",
    )
    study = commands.add_parser("transfer-run", help="pretrain and fine-tune every pair")
    study.add_argument("runs", type=Path, help="folder the study's runs go to")
    study.add_argument("--properties", default=QM9, help=f"comma-separated (default {QM9})")
    study.add_argument("--task", default="task=qm9_{p}", help="a property's task overrides")
    study.add_argument("--seeds", default="0", help="comma-separated seeds")
    study.add_argument("--freeze", default="message_passing", help="comma-separated parts")
    # train.py overrides for every run follow (key=value, not options)
    return parser


@entry_point("oodmol ablation")
def main(argv: list[str]) -> int:
    parser = _parser()
    args, overrides = parser.parse_known_args(argv)
    if overrides and args.command != "transfer-run":
        parser.error(f"unrecognized arguments: {' '.join(overrides)}")
    if args.command == "transfer-run":
        study = plan(
            args.runs,
            args.properties.split(","),
            args.task,
            [int(s) for s in args.seeds.split(",")],
            args.freeze.split(","),
            overrides,
        )
        return run_study(*study)
    runs, skipped = complete_runs(args.runs)
    for reason in skipped:
        print(f"skipped {reason}", file=sys.stderr)
    if args.command == "benchml":
        paths, answered = write_benchml(runs, args.out, args.boom_tables, args.similarity_regressor)
        for path in paths:
            print(path)
        print(answered.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
        return 0
    if args.command == "transfer":
        table = transfer_table(runs, data_correlation(args.data_dir))
        figure = transfer_figure(table)
    elif args.command == "learning-curve":
        table = learning_curve_table(learning_curve_rows(runs))
        figure = learning_curve_figure(table)
    elif args.command == "geometry":
        rows = geometry_rows(runs)
        table = geometry_table(rows)
        molecules = None if args.changes is None else molecule_changes(rows, args.changes)
        figure = geometry_figure(table, molecules)
        if molecules is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            molecules.drop(columns=["folder"], errors="ignore").to_csv(
                args.out / "geometry-molecules.csv", index=False
            )
            print(args.out / "geometry-molecules.csv")
        for line in ranking_answer(table):
            print(line)
    elif args.command == "selection":
        table = selection_table(selection_rows(runs, args.runs))
        figure = selection_figure(table)
    else:
        table = augmentation_table(augmentation_rows(runs))
        figure = augmentation_figure(table)
    for path in write_outputs(table, figure, args.out, args.command):
        print(path)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
