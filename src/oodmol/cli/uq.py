"""oodmol uq combine <folder with member runs> --out <run folder>: an ensemble's members,
trained as separate jobs, combined into its run."""

from __future__ import annotations

from pathlib import Path

from oodmol.cli.entry import ToolParser, entry_point
from oodmol.training.ensembles import combine_members, find_members
from oodmol.uq.calibrators import CALIBRATORS
from oodmol.uq.evaluators import EVALUATORS


@entry_point("oodmol uq")
def combine(argv: list[str]) -> int:
    """`oodmol uq combine`: the members' runs (uq.member=<k>) combined into one run."""
    parser = ToolParser(prog="oodmol uq combine", description=__doc__)
    parser.add_argument("members", type=Path, help="folder searched for member runs")
    parser.add_argument("--out", type=Path, required=True, help="folder for the result")
    for option, registry in (("--calibrators", CALIBRATORS), ("--evaluators", EVALUATORS)):
        parser.add_argument(
            option,
            nargs="*",
            choices=list(registry),
            help=f"as uq.{option[2:]} in the members' runs (default: all)",
        )
    args = parser.parse_args(argv)
    member_dirs = find_members(args.members)
    combine_members(member_dirs, args.out, args.calibrators, args.evaluators)
    print(f"combined {len(member_dirs)} members into {args.out}")
    return 0
