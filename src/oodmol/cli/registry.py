"""Every command `oodmol` runs, each once, with its one-line help: the dispatch and every
`--help` of a group are read from `OODMOL`, so what the help lists is what runs.

A command is one of three kinds: a Hydra application (run as `python -m <module>`), a
tool (a `main(argv) -> status` run in this process) or a group, whose first argument
names one of its own commands (`oodmol data export`, `oodmol ablation transfer`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class HydraApp:
    """A Hydra application: its overrides pass through unchanged to `python -m <module>`,
    which the `oodmol` process becomes (the process that Hydra, Lightning's DDP launcher
    and a cluster's signals expect: a training run re-launches its own command line for
    every DDP process)."""

    name: str
    help: str
    module: str


@dataclass(frozen=True)
class Tool:
    """A tool run in this process: `main` names its `main(argv) -> status` as
    `<module>:<function>`, imported only when it runs, so that `oodmol --help` and the
    Hydra applications start without the tools' imports."""

    name: str
    help: str
    main: str

    def load(self) -> Callable[[list[str]], int]:
        module, _, function = self.main.partition(":")
        return getattr(importlib.import_module(module), function)


@dataclass(frozen=True)
class Group:
    """A command whose first argument names one of `commands`."""

    name: str
    help: str
    commands: tuple[Command, ...]

    def get(self, name: str) -> Command | None:
        return next((c for c in self.commands if c.name == name), None)

    def leaves(self, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Command]]:
        """Every command a user runs below this group, by its words after the group's."""
        for command in self.commands:
            words = (*path, command.name)
            if isinstance(command, Group):
                yield from command.leaves(words)
            else:
                yield words, command


Command = HydraApp | Tool | Group


OODMOL = Group(
    "oodmol",
    "the benchmark's tools under one command",
    (
        HydraApp(
            "train",
            "train and test a model: model=<m> task=<t> split=<s> ...",
            "oodmol.apps.train",
        ),
        HydraApp(
            "evaluate",
            "score a checkpoint (ckpt_path=) or predictions (predictions=<csv>)",
            "oodmol.apps.evaluate",
        ),
        HydraApp(
            "predict",
            "predict new molecules: ckpt_path=<ckpt> input=<csv> out=<csv>",
            "oodmol.apps.predict",
        ),
        Group(
            "data",
            "data sets, splits and feature caches (task=<t> split=<s> ...)",
            (
                Tool(
                    "export",
                    "write a split as CSV (mol_id,smiles,target,set) to out=<file.csv>",
                    "oodmol.cli.data:export",
                ),
                Tool(
                    "prepare",
                    "build the data set, its split and feature caches ahead of a sweep",
                    "oodmol.cli.data:prepare",
                ),
                Tool(
                    "card",
                    "write a dataset card (counts, units, histogram) to out=<dir>",
                    "oodmol.cli.data:card",
                ),
                Tool(
                    "geometry",
                    "build the 3D geometries of conformers=<name> and check them",
                    "oodmol.cli.data:geometry",
                ),
            ),
        ),
        Tool(
            "report",
            "the leaderboard of a folder of runs: <runs> --out <dir>",
            "oodmol.cli.report:main",
        ),
        Tool(
            "reproduce",
            "BOOM's numbers beside ours under both protocols: <runs> [--run]",
            "oodmol.cli.reproduce:main",
        ),
        Tool(
            "llm",
            "a language model's answers for a task's test set (BOOM's appendix E)",
            "oodmol.cli.llm:main",
        ),
        Tool(
            "pretrain",
            "pretrain a SMILES encoder, self-supervised: model= corpus= out=",
            "oodmol.cli.pretrain:main",
        ),
        Group(
            "uq",
            "uncertainty of ensembles trained as separate jobs",
            (
                Tool(
                    "combine",
                    "combine an ensemble's members into its run: <members> --out <dir>",
                    "oodmol.cli.uq:combine",
                ),
            ),
        ),
        Group(
            "ablation",
            "BOOM's ablations and the analyses beside them, from runs to figures",
            (
                Tool("transfer", "Fig. 5: pretraining transfer", "oodmol.cli.ablation:transfer"),
                Tool(
                    "augmentation",
                    "Fig. 7: OOD data augmentation",
                    "oodmol.cli.ablation:augmentation",
                ),
                Tool(
                    "selection",
                    "a search's draws chosen by ID validation, tail validation or OOD",
                    "oodmol.cli.ablation:selection",
                ),
                Tool(
                    "learning-curve",
                    "ID and OOD RMSE against training size",
                    "oodmol.cli.ablation:learning_curve",
                ),
                Tool(
                    "geometry",
                    "3D models on MMFF94 against GFN2-xTB geometries",
                    "oodmol.cli.ablation:geometry",
                ),
                Tool(
                    "benchml",
                    "BenchML's representations × simple regressors: RMSE, OOD/ID",
                    "oodmol.cli.ablation:benchml",
                ),
                Tool(
                    "transfer-run",
                    "train the transfer study's runs: pretrain and fine-tune every pair",
                    "oodmol.cli.ablation:transfer_run",
                ),
            ),
        ),
        Tool(
            "campaign",
            "a discovery campaign: task=... acquisition=... rounds=R batch=B",
            "oodmol.cli.campaign:campaign",
        ),
        Tool(
            "campaign-report",
            "recall against molecules acquired: <campaigns> --out <dir>",
            "oodmol.cli.campaign:report",
        ),
    ),
)
