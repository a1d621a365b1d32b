"""oodmol uq combine <folder with member runs> --out <run folder>: an ensemble's members,
trained as separate jobs, combined into its run."""

from __future__ import annotations

import sys
from pathlib import Path

from oodmol.command_line import ToolParser, entry_point
from oodmol.training.ensembles import combine_members, find_members
from oodmol.uq.calibrators import CALIBRATORS
from oodmol.uq.evaluators import EVALUATORS


@entry_point("oodmol uq")
def main(argv: list[str]) -> int:
    parser = ToolParser(prog="oodmol uq", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    combine = commands.add_parser(
        "combine", help="combine ensemble members (uq.member=<k> runs) into one run"
    )
    combine.add_argument("members", type=Path, help="folder searched for member runs")
    combine.add_argument("--out", type=Path, required=True, help="folder for the result")
    for option, registry in (("--calibrators", CALIBRATORS), ("--evaluators", EVALUATORS)):
        combine.add_argument(
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


if __name__ == "__main__":
    sys.exit(main())
