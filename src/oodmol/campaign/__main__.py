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

from hydra.errors import HydraException

from oodmol.campaign.driver import Campaign, CampaignError
from oodmol.campaign.settings import SettingsError, parse_arguments


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    try:
        settings, overrides = parse_arguments(argv)
        return Campaign(settings, overrides).run()
    except (SettingsError, HydraException) as error:  # a train.py override cannot compose
        print(f"oodmol campaign: {error}", file=sys.stderr)
        return 2
    except CampaignError as error:
        print(f"oodmol campaign: {error}", file=sys.stderr)
        return error.code


if __name__ == "__main__":
    sys.exit(main())
