"""Every config of every group composes, and what it names can be built, without training:
a typo in a YAML file or a renamed class fails here, not an hour into a cluster job. And
the defaults list lets experiment, search and debug configs set train.yaml's keys."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import omegaconf._utils
import pytest
import torch
import yaml
from hydra import compose, initialize_config_dir
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf

from oodmol.config import (
    CONFIG_DIR_ENV,
    OMEGACONF_PURE_PYTHON_LOADER,
    compose_config,
    config_dir,
    yaml_document,
    yaml_documents,
)
from oodmol.data.statistics import TrainingSplit, compute_statistics
from oodmol.data.store import FeatureStore
from oodmol.data.table import MoleculeTable
from oodmol.training.build import build_model

CONFIGS = config_dir()
# a few training molecules for the statistics a model declares
TRAIN_SMILES = ["CCO", "c1ccccc1O", "CC(=O)N", "OCC#N"]
# groups of configs/train.yaml's defaults, each tried with every option it has
TRAIN_GROUPS = (
    "task",
    "split",
    "model",
    "uq",
    "trainer",
    "logger",
    "callbacks",
    "debug",
    "conformers",
)


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONFIGS / group).glob("*.yaml"))


@pytest.fixture(scope="module")
def csv_task(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """A user CSV task, and a run folder (Hydra sets it in a real run)."""
    folder = tmp_path_factory.mktemp("configs")
    csv = folder / "mine.csv"
    csv.write_text("smiles,y\nCCO,1.0\nCCN,2.0\n")
    return [f"task.path={csv}", "task.target_column=y", f"paths.output_dir={folder / 'run'}"]


def composed(group: str, option: str, csv_task: list[str], hydra: bool = False) -> DictConfig:
    task = csv_task[:2] if (group, option) == ("task", "csv") else []
    overrides = [f"{group}={option}", *task, csv_task[2]]
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose("train", overrides, return_hydra_config=hydra)


@pytest.fixture(scope="module")
def statistics(tmp_path_factory: pytest.TempPathFactory) -> Callable[[DictConfig], dict]:
    """The statistics a model declares, of a tiny training set featurised as it reads it
    (one feature cache per featuriser)."""
    folder = tmp_path_factory.mktemp("features")
    ids = np.arange(len(TRAIN_SMILES))
    targets = np.linspace(-1.0, 1.0, len(ids))
    table = MoleculeTable("tiny", ids, np.array(TRAIN_SMILES), {"y": targets})
    stores: dict[str, FeatureStore] = {}

    def compute(cfg: DictConfig) -> dict:
        featurizer = instantiate(cfg.model.featurizer)
        key = json.dumps([featurizer.name, featurizer.params()], sort_keys=True)
        if key not in stores:
            stores[key] = FeatureStore.build_or_open(
                featurizer, table, folder, n_jobs=1, progress=False
            )
        features = instantiate(cfg.model.features)
        features.fit(stores[key], ids)
        specs = {p: instantiate(s) for p, s in (cfg.model.get("statistics") or {}).items()}
        return compute_statistics(specs, TrainingSplit(stores[key], features, ids, targets), None)

    return compute


# building these takes tens of seconds (DimeNet++'s spherical basis, ModernBERT's layers)
HEAVY = {("model", "dimenetpp"), ("model", "modernbert")}


@pytest.mark.parametrize(
    "group, option",
    [
        pytest.param(group, option, marks=[pytest.mark.slow] * ((group, option) in HEAVY))
        for group in TRAIN_GROUPS
        for option in options(group)
    ],
)
def test_every_config_composes_and_builds(group, option, csv_task, statistics) -> None:
    cfg = composed(group, option, csv_task)
    instantiate(cfg.task)
    instantiate(cfg.split)
    assert build_model(cfg, statistics(cfg)).n_params() >= 0
    for entry in (cfg.logger or {}).values():
        if entry is not None:
            instantiate(entry)
    for entry in (cfg.callbacks or {}).values():
        if entry is not None:
            instantiate(entry)
    trainer = cfg.trainer
    if trainer.accelerator == "gpu" and not torch.cuda.is_available():
        trainer = OmegaConf.merge(trainer, {"accelerator": "cpu"})  # the rest as configured
    instantiate(trainer, logger=False, enable_checkpointing=False)


def test_every_featurizer_and_source_builds() -> None:
    for name in options("featurizer"):
        featurizer = compose_config(f"featurizer/{name}", []).featurizer
        instantiate(featurizer)
    for name in options("source"):
        instantiate(OmegaConf.load(CONFIGS / "source" / f"{name}.yaml"))


@pytest.mark.parametrize("launcher", options("hydra/launcher"))
def test_every_launcher_composes_and_names_a_class(launcher: str, csv_task) -> None:
    cfg = composed("hydra/launcher", launcher, csv_task, hydra=True)
    assert get_class(cfg.hydra.launcher._target_)


def test_slurm_launcher_requeues_and_warns_before_the_time_limit(csv_task) -> None:
    launcher = composed("hydra/launcher", "slurm", csv_task, hydra=True).hydra.launcher
    assert launcher.additional_parameters.requeue is True
    assert launcher.signal_delay_s > 0 and launcher.max_num_timeout > 0


@pytest.mark.parametrize("experiment", options("experiment"))
def test_every_experiment_sweeps_existing_configs(experiment: str, csv_task) -> None:
    cfg = composed("experiment", experiment, csv_task, hydra=True)
    params = cfg.hydra.sweeper.params
    assert params, f"experiment={experiment} sweeps nothing"
    for key, values in params.items():
        if key in TRAIN_GROUPS or "/" in key:  # a group (model/representation: a
            # group of the model's configs): every value must be one of its configs
            assert set(str(values).split(",")) <= set(options(key)), (experiment, key)
        else:  # a setting that exists (its default may be null: split.subset)
            assert OmegaConf.select(cfg, key, default=KeyError) is not KeyError, (experiment, key)


@pytest.mark.parametrize("search", options("hparams_search"))
def test_every_search_names_settings_that_exist(search: str, csv_task) -> None:
    cfg = composed("hparams_search", search, csv_task, hydra=True)
    assert cfg.optimized_metric
    assert get_class(cfg.hydra.sweeper._target_)
    assert cfg.hydra.sweeper.max_failure_rate == 1.0  # a failed trial never ends the search
    for key in cfg.hydra.sweeper.params:
        assert OmegaConf.select(cfg, key, throw_on_missing=False) is not None, key


def test_debug_config_sets_train_keys() -> None:
    cfg = compose_config("train", ["debug=fast"])
    assert cfg.progress is False
    assert cfg.trainer.limit_train_batches == 3


def test_experiment_can_set_seed_and_train_keys(tmp_path: Path, monkeypatch) -> None:
    tree = tmp_path / "configs"
    shutil.copytree(CONFIGS, tree)
    (tree / "experiment" / "seeded.yaml").write_text(
        "# @package _global_\nseed: 7\nprogress: false\nmax_molecules: 100\n"
    )
    monkeypatch.setenv(CONFIG_DIR_ENV, str(tree))
    cfg = compose_config("train", ["experiment=seeded"])
    assert (cfg.seed, cfg.progress, cfg.max_molecules) == (7, False, 100)
    # the command line still has the last word
    assert compose_config("train", ["experiment=seeded", "seed=3"]).seed == 3


def test_the_tree_reads_as_the_pure_python_parser_reads_it() -> None:
    """`yaml_documents` (libyaml's parser, where PyYAML has it) gives every file of the
    tree the same documents as PyYAML's own safe loader."""
    for path in sorted(CONFIGS.rglob("*.yaml")):
        expected = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
        assert list(yaml_documents(path)) == expected, path
        if len(expected) == 1:
            assert yaml_document(path) == (expected[0] or {}), path


def test_hydra_reads_the_tree_as_omegaconfs_own_loader_does() -> None:
    """Hydra loads config files with `OmegaConf.load`, which oodmol points at libyaml's
    parser (where PyYAML has it): every file of the tree gives the config OmegaConf's own
    pure Python loader gives, and a duplicate key is still refused."""
    if yaml.__with_libyaml__:
        assert issubclass(omegaconf._utils.get_yaml_loader(), yaml.cyaml.CParser)
    for path in sorted(CONFIGS.rglob("*.yaml")):
        text = path.read_text(encoding="utf-8")
        expected = yaml.load(text, Loader=OMEGACONF_PURE_PYTHON_LOADER)
        loaded = OmegaConf.load(path)
        assert OmegaConf.to_container(loaded) == (expected or {}), path
    with pytest.raises(yaml.constructor.ConstructorError, match="duplicate key"):
        OmegaConf.create("lr: 1e-3\nlr: 2e-3\n")
    assert OmegaConf.create("lr: 1e-3").lr == 0.001  # OmegaConf's float rule, not YAML 1.1's
