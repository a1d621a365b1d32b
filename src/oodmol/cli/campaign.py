"""oodmol campaign: a discovery campaign on a task's OOD pool.

    oodmol campaign task=<task> model=<model> uq=<method> acquisition=<greedy|ucb|ei|random>
                    rounds=R batch=B [kappa=2] [direction=max|min|both] [top_fraction=0.01]
                    [out=<dir>] [seed=<n>] [other train.py overrides ...]

Round r trains the model on the training split plus the molecules acquired in rounds
before it, scores what remains of the OOD pool, acquires the B best by the rule and
reveals their labels. direction: max (default) hunts high values, min low ones, both the
farthest from the starting labels' median. Each round is recorded in the campaign's folder
(default runs/campaigns/<task>/<model>[+<uq>]/<acquisition>/<key>/<seed>); the same command
goes on after the last recorded round. `oodmol campaign-report <campaigns> --out <dir>`
draws recall against acquired molecules per rule.
"""

from __future__ import annotations

from pathlib import Path

from oodmol.campaign import comparison
from oodmol.campaign.comparison import campaign_figure, campaign_rows, campaign_table
from oodmol.campaign.driver import Campaign
from oodmol.campaign.settings import parse_arguments
from oodmol.cli.entry import ToolParser, entry_point
from oodmol.errors import UsageError
from oodmol.plotting import write_outputs


@entry_point("oodmol campaign", usage=__doc__)
def campaign(argv: list[str]) -> int:
    """`oodmol campaign`: run a campaign, or go on after its last recorded round."""
    if not argv:
        print(__doc__)
        raise UsageError("oodmol campaign: give task=... model=... acquisition=... (see above)")
    settings, overrides = parse_arguments(argv)
    return Campaign(settings, overrides).run()


@entry_point("oodmol campaign-report")
def report(argv: list[str]) -> int:
    """`oodmol campaign-report`: recall of the pool's top molecules against molecules
    acquired, one line per acquisition rule."""
    parser = ToolParser(prog="oodmol campaign-report", description=comparison.__doc__)
    parser.add_argument("campaigns", type=Path, nargs="+", help="campaign folders, or above")
    parser.add_argument("--out", type=Path, required=True, help="folder for CSV/PNG/SVG")
    args = parser.parse_args(argv)
    table = campaign_table(campaign_rows(args.campaigns))
    for path in write_outputs(table, campaign_figure(table), args.out, "campaigns"):
        print(path)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return 0
