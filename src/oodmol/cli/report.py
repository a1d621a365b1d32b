"""oodmol report <runs> --out <dir>: collect the runs below
a folder; write the leaderboard tables, figures and web site."""

from __future__ import annotations

import sys
from pathlib import Path

from oodmol.cli.entry import ToolParser, entry_point
from oodmol.errors import InputError, MissingFileError
from oodmol.plotting import save_figure
from oodmol.report.collect import collect_runs
from oodmol.report.figures.heatmaps import ood_heatmap
from oodmol.report.physics import write_physics
from oodmol.report.site import build_site
from oodmol.report.tables import label_benchmarks, summarize, write_tables
from oodmol.report.uq_tables import write_uq_tables


@entry_point("oodmol report")
def main(argv: list[str]) -> int:
    """Run the report; refused when the folder holds no valid run."""
    parser = ToolParser(prog="oodmol report", description=__doc__)
    parser.add_argument("runs_dir", type=Path, help="folder searched recursively for metrics.json")
    parser.add_argument("--out", type=Path, required=True, help="folder for tables and figure")
    args = parser.parse_args(argv)

    if not args.runs_dir.is_dir():
        raise MissingFileError(f"{args.runs_dir}: no such folder of runs")
    collection = collect_runs(args.runs_dir)
    for path, reason in collection.skipped:
        print(f"skipped {path}: {reason}", file=sys.stderr)
    if collection.skipped:
        print(f"skipped {len(collection.skipped)} metrics.json file(s)", file=sys.stderr)
    if collection.runs.empty:
        raise InputError(
            f"{args.runs_dir}: no valid metrics.json below it (train.py writes one per run)"
        )

    runs, warnings = label_benchmarks(collection.runs)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    summary = summarize(runs)

    args.out.mkdir(parents=True, exist_ok=True)
    runs.to_csv(args.out / "runs.csv", index=False)
    written = [args.out / "runs.csv", *write_tables(summary, args.out)]
    written += write_uq_tables(runs, args.out)
    written += save_figure(ood_heatmap(summary), args.out / "heatmap")
    written += write_physics(runs, args.out)
    written += build_site(runs, summary, args.out)
    print(f"read {len(runs)} run(s); wrote " + ", ".join(str(p) for p in written))
    return 0
