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

import sys

from oodmol.campaign.driver import Campaign
from oodmol.campaign.settings import parse_arguments
from oodmol.command_line import entry_point
from oodmol.errors import UsageError


@entry_point("oodmol campaign", usage=__doc__)
def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        raise UsageError("oodmol campaign: give task=... model=... acquisition=... (see above)")
    settings, overrides = parse_arguments(argv)
    return Campaign(settings, overrides).run()


if __name__ == "__main__":
    sys.exit(main())
