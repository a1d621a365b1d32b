"""The commands of `oodmol data` (`oodmol data <command> ...`):

export    write the split as CSV (mol_id,smiles,target,set) to out=<file.csv>
prepare   build the data set, the split and the feature caches ahead of a sweep
          (featurizers=[descriptors,...]; representations=[soap,...]: those of
          configs/model/representation, as the regressors of experiment=benchml read them)
card      write a dataset card (counts, units, BOOM-style histogram) to out=<dir>
geometry  build the 3D geometries of conformers=<name> (resumable: run it again to go on)
          and check them (bond graph, valencies): counts, reasons, one row per
          molecule (RMSD, energy change) and their figure in out=<dir> (default
          <data>/geometry)
"""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from oodmol.cli.entry import entry_point
from oodmol.config import compose_config, config_dir
from oodmol.data.card import write_card
from oodmol.data.geometry_checks import check_store
from oodmol.data.geometry_figure import draw_check_report
from oodmol.data.splits.assignment import ALL_SETS
from oodmol.data.store import FeatureStore
from oodmol.data.task import TaskData, load_split, load_task
from oodmol.errors import UsageError
from oodmol.io import atomic_write_json
from oodmol.overrides import compose_checked, names_of, unknown_choice_message
from oodmol.parallel import limit_threads
from oodmol.plotting import save_figure


def _usage(command: str) -> str:
    return f"usage: oodmol data {command} task=<t> split=<s> [overrides ...]\n\n{__doc__}"


@entry_point("oodmol data", usage=_usage("export"))
def export(argv: list[str]) -> int:
    """`oodmol data export`: the split as CSV."""
    return run("export", argv)


@entry_point("oodmol data", usage=_usage("prepare"))
def prepare(argv: list[str]) -> int:
    """`oodmol data prepare`: the data set, its split and feature caches."""
    return run("prepare", argv)


@entry_point("oodmol data", usage=_usage("card"))
def card(argv: list[str]) -> int:
    """`oodmol data card`: the dataset card."""
    return run("card", argv)


@entry_point("oodmol data", usage=_usage("geometry"))
def geometry(argv: list[str]) -> int:
    """`oodmol data geometry`: the 3D geometries, built and checked."""
    return run("geometry", argv)


def run(command: str, overrides: list[str]) -> int:
    """Compose the data config from `overrides`, load the task and its split, then
    `command`."""
    cfg = compose_checked("data", overrides)
    if cfg.get("threads") is not None:
        limit_threads(int(cfg.threads))
    # the feature caches' builds say what they do, and how far they got
    logging.basicConfig(level=logging.INFO, format="[oodmol] %(message)s")
    featurizers = chosen_configs(cfg.featurizers, overrides, "featurizers", "featurizer")
    representations = chosen_configs(
        cfg.get("representations"), overrides, "representations", "model/representation"
    )
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
        wanted = [(name, featurizer_of(cfg, name)) for name in featurizers] + [
            (name, instantiate(representation_featurizer(cfg, name))) for name in representations
        ]
        for name, featurizer in wanted:
            store = FeatureStore.build_or_open(
                featurizer, data.dataset, data_dir / "features", progress=cfg.progress
            )
            print(f"[oodmol] {name} features: {len(store)} molecules in {store.path}")
    elif command == "geometry":
        write_geometry_report(cfg, data, data_dir)
    else:
        out = Path(cfg.out or data_dir / "cards" / f"{task.name}-{cfg.split.name}")
        print(f"[oodmol] wrote {write_card(data, split, out)}")
    return 0


def write_geometry_report(cfg, data: TaskData, data_dir: Path) -> None:
    """Build (or open) the 3D features of the chosen geometry, check every molecule and
    write the check report: `<dataset>-<geometry>.json` (counts, reasons, failures by
    name), `.csv` (one row per molecule) and `.png|svg` (counts and distributions)."""
    geometry = str(cfg.conformers.name)
    featurizer = featurizer_of(cfg, "graph3d")
    store = FeatureStore.build_or_open(
        featurizer, data.dataset, data_dir / "features", progress=cfg.progress
    )
    report = check_store(store, data.dataset, geometry, progress=cfg.progress)
    out = Path(cfg.out or data_dir / "geometry")
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{data.dataset.name}-{geometry}"
    summary = report.summary()
    atomic_write_json(
        Path(f"{stem}.json"), {**summary, "failed_molecules": report.to_json()["failed"]}
    )
    report.write_csv(Path(f"{stem}.csv"), data.dataset)
    save_figure(draw_check_report(report, data.dataset.name), stem)
    print(
        f"[oodmol] {geometry} geometries of {data.dataset.name}: {summary['passed']} of "
        f"{summary['molecules']} pass the checks, {summary['failed']} fail"
    )
    for reason, count in summary["reasons"].items():
        print(f"[oodmol]   {count} {reason}")
    for example in summary["examples"]:
        print(f"[oodmol]   e.g. {example}")
    for key in ("median_rmsd_heavy", "median_rmsd_all", "median_energy_change_kcal"):
        if key in summary:
            print(f"[oodmol]   {key}: {summary[key]:.4g}")
    if "mean_cpu_seconds" in summary:
        print(
            f"[oodmol]   the optimiser: {summary['mean_steps']:.1f} steps and "
            f"{summary['mean_cpu_seconds']:.2f} CPU-s per molecule on average (median "
            f"{summary['median_steps']:.0f} and {summary['median_cpu_seconds']:.2f}), "
            f"{summary['cpu_hours']:.2f} CPU-hours in all"
        )
    print(f"[oodmol] wrote {stem}.json, .csv, .png and .svg")


def featurizer_of(cfg, name: str):
    """The featuriser of configs/featurizer/<name>.yaml, its interpolations resolved
    against the command's config (the graph3d features' `conformers=`, the physics
    estimates' task settings)."""
    node = OmegaConf.create(
        {
            "conformers": OmegaConf.to_container(cfg.conformers, resolve=True),
            "task": OmegaConf.to_container(cfg.task, resolve=False),
            # composed: a featuriser of parts names them in its defaults
            "featurizer": compose_config(f"featurizer/{name}", []).featurizer,
        }
    )
    return instantiate(node.featurizer)


def chosen_configs(value: object, overrides: list[str], key: str, folder: str) -> list[str]:
    """The config names `key=` lists (one, a list, or comma-joined), each checked against
    configs/<folder>/*.yaml: an unknown one is a usage error naming the choices."""
    names = [str(name) for name in names_of(value or [])]
    known = sorted(path.stem for path in (config_dir() / folder).glob("*.yaml"))
    for name in names:
        if name not in known:
            given = next(o for o in reversed(overrides) if o.startswith(f"{key}="))
            what = folder.rsplit("/", 1)[-1]
            raise UsageError(unknown_choice_message(given, what, name, known, folder))
    return names


def representation_featurizer(cfg: DictConfig, name: str) -> DictConfig:
    """The featuriser config of configs/model/representation/<name>.yaml as a run of the
    task in `cfg` reads it (its interpolations, such as the elements of the task's
    source, resolved against `cfg`)."""
    node = compose_config(f"model/representation/{name}", [])
    merged = OmegaConf.merge(OmegaConf.create(OmegaConf.to_container(cfg)), node)
    return merged.model.representation.featurizer


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
