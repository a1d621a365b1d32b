"""`oodmol ablation <command>`: BOOM's ablations and the analyses beside them, from a
folder of runs to figures (CSV, PNG and SVG); `transfer-run` trains the transfer study's
runs. The commands are the registry's; `oodmol ablation <command> --help` gives each
one's arguments."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from oodmol.ablation.augmentation import augmentation_figure, augmentation_rows, augmentation_table
from oodmol.ablation.benchml import SIMILARITY_REGRESSOR, write_benchml
from oodmol.ablation.geometry import (
    geometry_figure,
    geometry_rows,
    geometry_table,
    molecule_changes,
    paired_answer,
    paired_changes,
    ranking_answer,
)
from oodmol.ablation.learning_curve import (
    learning_curve_figure,
    learning_curve_rows,
    learning_curve_table,
)
from oodmol.ablation.runs import Run, complete_runs
from oodmol.ablation.selection import selection_figure, selection_rows, selection_table
from oodmol.ablation.transfer import data_correlation, transfer_figure, transfer_table
from oodmol.ablation.transfer_runs import plan, run_study
from oodmol.cli.entry import ToolParser, entry_point
from oodmol.plotting import write_outputs
from oodmol.report.boom_reference import published_rmse

QM9 = "alpha,cv,gap,homo,lumo,mu,r2,zpve"


def _figure_parser(name: str, description: str) -> ToolParser:
    parser = ToolParser(prog=f"oodmol ablation {name}", description=description)
    parser.add_argument("runs", type=Path, help="folder searched for metrics.json")
    parser.add_argument("--out", type=Path, required=True, help="folder for CSV/PNG/SVG")
    return parser


def _runs(folder: Path) -> list[Run]:
    """The complete runs below `folder`; the others named on stderr."""
    runs, skipped = complete_runs(folder)
    for reason in skipped:
        print(f"skipped {reason}", file=sys.stderr)
    return runs


def _write(table: pd.DataFrame, figure: Figure, out: Path, name: str) -> int:
    for path in write_outputs(table, figure, out, name):
        print(path)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return 0


@entry_point("oodmol ablation")
def transfer(argv: list[str]) -> int:
    """`oodmol ablation transfer`: Fig. 5, pretraining transfer."""
    parser = _figure_parser("transfer", "Fig. 5: pretraining transfer")
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path(os.environ.get("OODMOL_DATA_DIR", "data")),
        help="data caches, for the properties' correlation ($OODMOL_DATA_DIR)",
    )
    args = parser.parse_args(argv)
    table = transfer_table(_runs(args.runs), data_correlation(args.data_dir))
    return _write(table, transfer_figure(table), args.out, "transfer")


@entry_point("oodmol ablation")
def augmentation(argv: list[str]) -> int:
    """`oodmol ablation augmentation`: Fig. 7, OOD data augmentation."""
    args = _figure_parser("augmentation", "Fig. 7: OOD data augmentation").parse_args(argv)
    table = augmentation_table(augmentation_rows(_runs(args.runs)))
    return _write(table, augmentation_figure(table), args.out, "augmentation")


@entry_point("oodmol ablation")
def selection(argv: list[str]) -> int:
    """`oodmol ablation selection`: a search's draws selected by ID validation, tail
    validation and OOD test."""
    parser = _figure_parser(
        "selection", "a search's draws selected by ID validation, tail validation, OOD test"
    )
    args = parser.parse_args(argv)
    table = selection_table(selection_rows(_runs(args.runs), args.runs))
    return _write(table, selection_figure(table), args.out, "selection")


@entry_point("oodmol ablation")
def learning_curve(argv: list[str]) -> int:
    """`oodmol ablation learning-curve`: ID and OOD RMSE against training size."""
    parser = _figure_parser("learning-curve", "ID and OOD RMSE against training size")
    args = parser.parse_args(argv)
    table = learning_curve_table(learning_curve_rows(_runs(args.runs)))
    return _write(table, learning_curve_figure(table), args.out, "learning-curve")


@entry_point("oodmol ablation")
def geometry(argv: list[str]) -> int:
    """`oodmol ablation geometry`: 3D models on MMFF94 against GFN2-xTB geometries, and
    per molecule with a geometry report's CSV."""
    parser = _figure_parser("geometry", "3D models on MMFF94 against GFN2-xTB geometries")
    parser.add_argument(
        "--changes",
        type=Path,
        default=None,
        help="a geometry report's CSV (oodmol data geometry conformers=xtb): "
        "per-molecule error change against RMSD and energy change",
    )
    args = parser.parse_args(argv)
    rows = geometry_rows(_runs(args.runs))
    table = geometry_table(rows)
    molecules = None if args.changes is None else molecule_changes(rows, args.changes)
    paired = paired_changes(rows)
    figure = geometry_figure(table, molecules, paired)
    if molecules is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        molecules.drop(columns=["folder"], errors="ignore").to_csv(
            args.out / "geometry-molecules.csv", index=False
        )
        print(args.out / "geometry-molecules.csv")
    if not paired.empty:
        args.out.mkdir(parents=True, exist_ok=True)
        paired.to_csv(args.out / "geometry-paired.csv", index=False)
        print(args.out / "geometry-paired.csv")
    for line in ranking_answer(table) + paired_answer(paired):
        print(line)
    return _write(table, figure, args.out, "geometry")


@entry_point("oodmol ablation")
def benchml(argv: list[str]) -> int:
    """`oodmol ablation benchml`: BenchML's representations × regressors."""
    parser = _figure_parser("benchml", "BenchML's figures of a folder of runs")
    parser.add_argument(
        "--similarity-regressor",
        default=SIMILARITY_REGRESSOR,
        help=f"the regressor whose OOD errors are correlated (default {SIMILARITY_REGRESSOR})",
    )
    args = parser.parse_args(argv)
    runs = _runs(args.runs)
    paths, answered = write_benchml(runs, args.out, published_rmse(), args.similarity_regressor)
    for path in paths:
        print(path)
    print(answered.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return 0


@entry_point("oodmol ablation")
def transfer_run(argv: list[str]) -> int:
    """`oodmol ablation transfer-run`: pretrain and fine-tune every pair of the transfer
    study; train.py overrides for every run follow the options."""
    parser = ToolParser(
        prog="oodmol ablation transfer-run", description="pretrain and fine-tune every pair"
    )
    parser.add_argument("runs", type=Path, help="folder the study's runs go to")
    parser.add_argument("--properties", default=QM9, help=f"comma-separated (default {QM9})")
    parser.add_argument("--task", default="task=qm9_{p}", help="a property's task overrides")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds")
    parser.add_argument("--freeze", default="message_passing", help="comma-separated parts")
    args, overrides = parser.parse_known_args(argv)  # key=value, not options
    study = plan(
        args.runs,
        args.properties.split(","),
        args.task,
        [int(s) for s in args.seeds.split(",")],
        args.freeze.split(","),
        overrides,
    )
    return run_study(*study)
