"""Data command line: python -m oodmol.data {export,prepare,card} task=<t> split=<s> ...

export   write the split as CSV (mol_id,smiles,target,set) to out=<file.csv>
prepare  build the data set, the split and the feature caches ahead of a sweep
card     write a dataset card (counts, units, BOOM-style histogram) to out=<dir>
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.utils import instantiate
from omegaconf import ListConfig, OmegaConf

from oodmol.config import compose_config, config_dir
from oodmol.data.card import write_card
from oodmol.data.splits.assignment import ALL_SETS
from oodmol.data.store import FeatureStore
from oodmol.data.task import TaskData, load_split, load_task
from oodmol.errors import door, without_debug_flag

COMMANDS = ("export", "prepare", "card")
CHOICES = {"task": "task", "split": "split", "featurizers": "featurizer"}  # key -> group


class UsageError(Exception):
    """A command line that names a task, split or featuriser this repository lacks."""


def main(argv: list[str]) -> int:
    return door("oodmol", lambda: run(without_debug_flag(argv)), argv)


def run(argv: list[str]) -> int:
    if not argv or argv[0] not in COMMANDS:
        if argv:
            print(f"unknown command {argv[0]!r}", file=sys.stderr)
        print(__doc__, file=sys.stderr)
        return 2
    command, overrides = argv[0], argv[1:]
    try:
        check_choices(overrides)
    except UsageError as error:
        print(f"python -m oodmol.data: {error}", file=sys.stderr)
        return 2
    cfg = compose_config("data", overrides)
    task = instantiate(cfg.task)
    data_dir = Path(cfg.paths.data_dir)
    data = load_task(task, data_dir, progress=cfg.progress)
    split = load_split(data, instantiate(cfg.split), data_dir)
    print(f"[oodmol] {task.name} / {cfg.split.name}: {split.sizes()} (hash {split.hash})")
    if command == "export":
        out = Path(cfg.out or f"{task.name}-{cfg.split.name}.csv")
        export_csv(data, split.sets, out)
        print(f"[oodmol] wrote {out}")
    elif command == "prepare":
        for name in names_of(cfg.featurizers):
            featurizer = instantiate(OmegaConf.load(config_dir() / "featurizer" / f"{name}.yaml"))
            store = FeatureStore.build_or_open(
                featurizer, data.dataset, data_dir / "features", progress=cfg.progress
            )
            print(f"[oodmol] {name} features: {len(store)} molecules in {store.path}")
    else:
        out = Path(cfg.out or data_dir / "cards" / f"{task.name}-{cfg.split.name}")
        print(f"[oodmol] wrote {write_card(data, split, out)}")
    return 0


def tool_config(name: str, overrides: list[str], required: tuple[str, ...]):
    """A `key=value` tool's config (configs/<name>.yaml with `overrides`), after refusing
    unknown choices and before anything runs: every `required` key given."""
    check_choices(overrides)
    cfg = compose_config(name, overrides)
    for key in required:
        if OmegaConf.is_missing(cfg, key):
            raise UsageError(f"{key}=... is required (see configs/{name}.yaml)")
    return cfg


def check_choices(overrides: list[str]) -> None:
    """Refuse an unknown task, split or featuriser before any data is read, naming the
    ones there are (the YAML files of their config group)."""
    for override in OverridesParser.create().parse_overrides(overrides):
        group = CHOICES.get(override.key_or_group)
        if group is None or override.is_delete():
            continue
        known = sorted(path.stem for path in (config_dir() / group).glob("*.yaml"))
        for name in names_of(override.value()):
            if str(name) not in known:
                raise UsageError(
                    f"unknown {group} {name!r}; available: {', '.join(known)} "
                    f"(configs/{group}/*.yaml)"
                )


def names_of(value: object) -> list:
    """One name or a list of them; `featurizers=morgan` means `[morgan]`, not 6 letters."""
    return list(value) if isinstance(value, list | ListConfig) else [value]


def export_csv(data: TaskData, sets: dict, out: Path) -> None:
    """mol_id, canonical SMILES, target and set of every molecule of the task (in a set:
    split.subset leaves training molecules out)."""
    frames = []
    for name in (name for name in ALL_SETS if name in sets):
        rows = data.table.rows_of(sets[name])
        frames.append(
            pd.DataFrame(
                {
                    "mol_id": data.table.mol_id[rows],
                    "smiles": data.table.smiles[rows],
                    "target": data.y[rows],
                    "set": name,
                }
            )
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    pd.concat(frames).sort_values("mol_id").to_csv(out, index=False)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
