"""CLI: collect runs below a folder; write the leaderboard tables, figures and web site."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from oodmol.report.collect import collect_runs
from oodmol.report.figures import save_figure
from oodmol.report.figures.heatmaps import ood_heatmap
from oodmol.report.site import build_site
from oodmol.report.tables import label_benchmarks, summarize, write_tables
from oodmol.report.uq_tables import write_uq_tables


def main(argv: list[str] | None = None) -> int:
    """Run the report; return the exit status (1 when there is no valid run)."""
    parser = argparse.ArgumentParser(prog="python -m oodmol.report", description=__doc__)
    parser.add_argument("runs_dir", type=Path, help="folder searched recursively for metrics.json")
    parser.add_argument("--out", type=Path, required=True, help="folder for tables and figure")
    args = parser.parse_args(argv)

    if not args.runs_dir.is_dir():
        print(f"error: {args.runs_dir} is not a directory", file=sys.stderr)
        return 1
    collection = collect_runs(args.runs_dir)
    for path, reason in collection.skipped:
        print(f"skipped {path}: {reason}", file=sys.stderr)
    if collection.skipped:
        print(f"skipped {len(collection.skipped)} metrics.json file(s)", file=sys.stderr)
    if collection.runs.empty:
        print(f"error: no valid metrics.json found below {args.runs_dir}", file=sys.stderr)
        return 1

    runs, warnings = label_benchmarks(collection.runs)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    summary = summarize(runs)

    args.out.mkdir(parents=True, exist_ok=True)
    runs.to_csv(args.out / "runs.csv", index=False)
    written = [args.out / "runs.csv", *write_tables(summary, args.out)]
    written += write_uq_tables(runs, args.out)
    written += save_figure(ood_heatmap(summary), args.out / "heatmap")
    written += build_site(runs, summary, args.out)
    print(f"read {len(runs)} run(s); wrote " + ", ".join(str(p) for p in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
