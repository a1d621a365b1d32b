"""The two dependent stages of `experiment=boom_transfer`, one after the other.

For every ordered pair (source s, target t) of the properties: pretrain on s, on the
molecules of t's split less t's ID and OOD test sets (`split=ood_of split.property=t`:
the training and validation molecules of t's own split, labelled with s), then fine-tune
on t's training split from that checkpoint with `--freeze` kept fixed; and once per
target the un-pretrained model with the same budget. BOOM pretrained on all of QM9,
which puts the target's test molecules (with the other property's labels) into the
pretraining; here they never are.

Runs go to `<runs>/pretrain/<s>_for_<t>/<seed>`, `<runs>/finetune/<s>_to_<t>/<seed>` and
`<runs>/scratch/<t>/<seed>`; a finished run is reused, so the command resumes.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from oodmol.errors import InputError
from oodmol.run_record import read_record
from oodmol.training.child import run_train
from oodmol.training.run_folder import CHECKPOINT_DIR


@dataclass(frozen=True)
class Job:
    """One training run of the study: its folder and command-line overrides."""

    folder: Path
    overrides: tuple[str, ...]


def task_args(template: str, prop: str) -> list[str]:
    """The overrides naming a property's task: `template` with `{p}` replaced."""
    return template.format(p=prop).split()


def tested_checkpoint(folder: Path) -> Path:
    """The checkpoint a finished run tested (its best or its last epoch)."""
    tested = read_record(folder).training.get("tested", "best")
    return folder / CHECKPOINT_DIR / f"{tested}.ckpt"


def plan(
    runs: Path,
    properties: Sequence[str],
    template: str,
    seeds: Sequence[int],
    freeze: Sequence[str],
    extra: Sequence[str] = (),
) -> tuple[list[Job], list[tuple[Job, Job]]]:
    """The un-pretrained jobs, and (pretraining, fine-tuning) job pairs; the fine-tuning
    job's `init_from` is filled in once its pretraining has run."""
    if len(set(properties)) < 2:
        raise InputError(f"the transfer study needs two properties or more, got {properties}")
    common = ["experiment=boom_transfer", *extra]
    scratch, pairs = [], []
    for seed in seeds:
        for target in properties:
            scratch.append(
                Job(
                    runs / "scratch" / target / str(seed),
                    (*task_args(template, target), "split=ood", *common, f"seed={seed}"),
                )
            )
            for source in properties:
                if source == target:
                    continue
                pretrain = Job(
                    runs / "pretrain" / f"{source}_for_{target}" / str(seed),
                    (
                        *task_args(template, source),
                        "split=ood_of",
                        f"split.property={target}",
                        *common,
                        f"seed={seed}",
                    ),
                )
                finetune = Job(
                    runs / "finetune" / f"{source}_to_{target}" / str(seed),
                    (
                        *task_args(template, target),
                        "split=ood",
                        *common,
                        f"model.freeze=[{','.join(freeze)}]",
                        f"seed={seed}",
                    ),
                )
                pairs.append((pretrain, finetune))
    return scratch, pairs


def train(job: Job, init_from: Path | None = None) -> int:
    """Run train.py for `job` (in this interpreter); its exit status."""
    start = [f"model.init_from={init_from}"] if init_from is not None else []
    overrides = [*job.overrides, *start, f"hydra.run.dir={job.folder}"]
    print("[oodmol ablation] " + " ".join(overrides), flush=True)
    return run_train(overrides)


def run_study(scratch: Sequence[Job], pairs: Sequence[tuple[Job, Job]]) -> int:
    """Train every job of the study's `plan` (pretraining before its fine-tuning); 0 when
    all ran, 1 naming the folders of the ones that failed."""
    failed = [job.folder for job in scratch if train(job)]
    for pretrain, finetune in pairs:
        if train(pretrain):
            failed += [pretrain.folder, finetune.folder]
        elif train(finetune, tested_checkpoint(pretrain.folder)):
            failed.append(finetune.folder)
    for folder in failed:
        print(f"[oodmol ablation] failed: {folder}", file=sys.stderr)
    return 1 if failed else 0
