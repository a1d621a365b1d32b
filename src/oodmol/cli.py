"""The `oodmol` command, one entry to every tool of the benchmark:

oodmol train    <overrides>            train and test a model   (python train.py)
oodmol evaluate <overrides>            score a checkpoint or a predictions file
oodmol predict  ckpt_path=... input=... out=...   predict new molecules
oodmol data     {export,prepare,card} <overrides>   data sets, splits, feature caches
oodmol report   <runs> --out <dir>     the leaderboard of a folder of runs
oodmol reproduce <runs> [--run]        BOOM's numbers beside ours under both protocols
oodmol llm      task=... backend={hf,openai} out=...   a language model's answers (BOOM App. E)
oodmol pretrain model=... corpus=... out=...   masked-LM pretraining of a SMILES encoder
oodmol uq       combine <members> --out <dir>       combine ensemble members
oodmol ablation {transfer,augmentation} <runs> --out <dir>   BOOM's Figs. 5 and 7
oodmol campaign task=... acquisition=... rounds=R batch=B   a discovery campaign
oodmol campaign-report <campaigns> --out <dir>     recall against acquired molecules
"""

from __future__ import annotations

import importlib
import os
import sys

# Hydra applications run as `python -m <module>`: the process is then the one Hydra,
# Lightning's DDP launcher and a cluster's signals expect (a training run re-launches
# its own command line for every DDP process)
HYDRA_APPS = {
    "train": "oodmol.apps.train",
    "evaluate": "oodmol.apps.evaluate",
    "predict": "oodmol.apps.predict",
}
TOOLS = {
    "ablation": "oodmol.ablation.__main__",
    "campaign": "oodmol.campaign.__main__",
    "campaign-report": "oodmol.campaign.report",
    "data": "oodmol.data.__main__",
    "llm": "oodmol.apps.llm",
    "pretrain": "oodmol.apps.pretrain",
    "report": "oodmol.report.__main__",
    "reproduce": "oodmol.apps.reproduce",
    "uq": "oodmol.apps.uq",
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(__doc__)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command in HYDRA_APPS:
        os.execv(sys.executable, [sys.executable, "-m", HYDRA_APPS[command], *rest])
    if command in TOOLS:
        return importlib.import_module(TOOLS[command]).main(rest)
    print(f"oodmol: unknown command {command!r}; one of {[*HYDRA_APPS, *TOOLS]}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
