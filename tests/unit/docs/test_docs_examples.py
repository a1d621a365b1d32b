"""The worked examples of docs/extending/ run as the pages show them: each page's Python
file and YAML file are taken from the page itself (its code blocks with a `title`), the
YAML added to a copy of the config tree (OODMOL_CONFIG_DIR) and the Python installed as
the module the YAML names. A model builds and predicts a batch, a task loads and splits,
a split holds out its tail, an uncertainty method asks for what it needs."""

from __future__ import annotations

import importlib
import json
import re
import shutil
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from paths import REPO

import oodmol.uq.estimators
from oodmol.config import CONFIG_DIR_ENV, compose_config, config_dir
from oodmol.data.statistics import TrainingSplit, compute_statistics
from oodmol.data.store import FeatureStore
from oodmol.data.table import MoleculeTable
from oodmol.data.task import load_split, load_task
from oodmol.training.build import build_datamodule, build_model
from oodmol.uq.estimators import ESTIMATORS, estimator_from_config
from oodmol.uq.likelihood import GaussianLikelihood

PAGES = REPO / "docs" / "extending"
BLOCK = re.compile(r'^```(\w+) title="([^"]+)"\n(.*?)^```$', re.MULTILINE | re.DOTALL)
SMILES = ["CCO", "c1ccccc1O", "CC(=O)N", "OCC#N", "CCN(CC)CC", "O=C(O)c1ccccc1"]
# thirty distinct molecules: enough for every set of a split
MANY = [chain + end for end in ("", "O", "N") for chain in ("C" * n for n in range(1, 11))]


def examples(page: str) -> dict[str, str]:
    """The page's titled code blocks: file name -> content."""
    text = (PAGES / page).read_text(encoding="utf-8")
    return {title: body for _, title, body in BLOCK.findall(text)}


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the config tree, in use for this test."""
    folder = tmp_path / "configs"
    shutil.copytree(config_dir(), folder)
    monkeypatch.setenv(CONFIG_DIR_ENV, str(folder))
    return folder


def add_config(tree: Path, files: dict[str, str]) -> None:
    """The page's YAML files, written where their titles say (configs/<group>/<name>)."""
    for title, body in files.items():
        if title.startswith("configs/"):
            target = tree / title.removeprefix("configs/")
            target.write_text(body, encoding="utf-8")


def install_module(name: str, code: str, monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """`code` as the module `name` (a new module of an existing package), for this test."""
    module = types.ModuleType(name)
    module.__file__ = f"<docs example {name}>"
    parent_name, _, child = name.rpartition(".")
    monkeypatch.setitem(sys.modules, name, module)
    exec(compile(code, module.__file__, "exec"), module.__dict__)
    monkeypatch.setattr(importlib.import_module(parent_name), child, module, raising=False)
    return module


def python_file(files: dict[str, str]) -> tuple[str, str]:
    """The page's one Python file under src/: its module name and its code."""
    (title,) = [t for t in files if t.startswith("src/") and t.endswith(".py")]
    return title.removeprefix("src/").removesuffix(".py").replace("/", "."), files[title]


def csv_task(tmp_path: Path) -> list[str]:
    csv = tmp_path / "mine.csv"
    rows = [f"{s},{i / 2}" for i, s in enumerate(SMILES)]
    csv.write_text("smiles,y\n" + "\n".join(rows) + "\n")
    return ["task=csv", f"task.path={csv}", "task.target_column=y"]


# ------------------------------------------------------------------------------ a model


def test_the_model_example_builds_and_predicts(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = examples("model.md")
    assert set(files) == {"src/oodmol/models/backbones/gin.py", "configs/model/gin.yaml"}
    add_config(tree, files)
    install_module(*python_file(files), monkeypatch)
    cfg = compose_config("train", ["model=gin", *csv_task(tmp_path)])
    assert cfg.model.name == "gin"

    featurizer = instantiate(cfg.model.featurizer)
    ids = np.arange(len(SMILES))
    targets = np.linspace(-1.0, 1.0, len(ids))
    table = MoleculeTable("tiny", ids, np.array(SMILES), {"y": targets})
    store = FeatureStore.build_or_open(
        featurizer, table, tmp_path / "features", n_jobs=1, progress=False
    )
    features = instantiate(cfg.model.features)
    features.fit(store, ids)
    specs = {path: instantiate(spec) for path, spec in cfg.model.statistics.items()}
    statistics = compute_statistics(specs, TrainingSplit(store, features, ids, targets), None)
    assert set(statistics) == {"backbone.atom_dim", "backbone.bond_dim"}

    model = build_model(cfg, statistics)
    (batch,) = features.dataset(store, ids, targets, "train").__getitems__(list(ids))
    out = model(batch)
    assert out.shape == (len(SMILES),) and torch.isfinite(out).all()
    out.square().mean().backward()
    assert model.backbone.eps.grad is not None  # every layer's ε is trained


# ------------------------------------------------------------------------------- a task


def write_sdf(path: Path, values: list[str]) -> None:
    from rdkit import Chem

    writer = Chem.SDWriter(str(path))
    for smiles, value in zip(MANY, values, strict=True):
        mol = Chem.MolFromSmiles(smiles)
        mol.SetProp("logS", value)
        writer.write(mol)
    writer.close()


def test_the_task_example_loads_and_splits(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = examples("task.md")
    assert set(files) == {"src/oodmol/data/sources/sdf.py", "configs/task/my_solubility.yaml"}
    add_config(tree, files)
    install_module(*python_file(files), monkeypatch)
    sdf = tmp_path / "solubility.sdf"
    values = [f"{v:.2f}" for v in np.random.default_rng(0).normal(-2.0, 1.0, len(MANY))]
    values[7] = "n/a"  # a record whose value is not a number
    write_sdf(sdf, values)
    cfg = compose_config("train", ["task=my_solubility", f"task.source.path={sdf}"])

    task = instantiate(cfg.task)
    data = load_task(task, tmp_path / "data", progress=False)
    assert (task.name, task.units, task.extensive) == ("my_solubility", "log(mol/L)", False)
    assert len(data.table) == len(MANY) - 1  # the record without a number is dropped
    assert data.report.n_read == len(MANY)
    expected = [float(v) for i, v in enumerate(values) if i != 7]
    assert sorted(data.y) == pytest.approx(sorted(expected))
    split = load_split(data, instantiate(cfg.split), tmp_path / "data")
    assert sum(len(ids) for ids in split.sets.values()) == len(data.table)
    assert len(split.sets["ood"]) == round(0.1 * len(data.table))  # task.ood_size: 0.1
    assert list((tmp_path / "data" / "splits" / "my_solubility").glob("ood-*.json"))


# ------------------------------------------------------------------------------ a split


def synthetic_table() -> MoleculeTable:
    """200 molecules with shuffled, gapped ids; the SMILES are placeholders (the split
    reads only the target)."""
    y = np.round(np.random.default_rng(3).normal(0.0, 1.0, 200), 2)
    ids = np.random.default_rng(1).permutation(np.arange(500, 500 + 2 * len(y), 2))
    return MoleculeTable("synthetic", ids, np.array([f"p-{i}" for i in ids]), {"y": y})


def test_the_split_example_holds_out_the_tail(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = examples("split.md")
    assert set(files) == {"src/oodmol/data/splits/value_tail.py", "configs/split/value_tail.yaml"}
    add_config(tree, files)
    install_module(*python_file(files), monkeypatch)
    table = synthetic_table()
    y = dict(zip(table.mol_id.tolist(), table.targets["y"], strict=True))
    kde = compose_config("train", ["split=ood", *csv_task(tmp_path)])

    for tail in ("high", "low"):
        overrides = ["split=value_tail", f"split.tail={tail}", *csv_task(tmp_path)]
        splitter = instantiate(compose_config("train", overrides).split)
        split = splitter.split(table, "y")
        ood = sorted(y[i] for i in split.sets["ood"])
        rest = [y[i] for name in ("train", "val", "id") for i in split.sets[name]]
        if tail == "high":
            assert min(ood) >= max(rest)
        else:
            assert max(ood) <= min(rest)
        # the other sets are sized as every split sizes them
        assert split.sizes() == instantiate(kde.split).split(table, "y").sizes()
        assert split.info["tail"] == tail and "ood_cut" in split.info
        shuffled = table.take(np.random.default_rng(0).permutation(len(table)))
        assert splitter.split(shuffled, "y").hash == split.hash


# ------------------------------------------------------------------ an uncertainty method


@pytest.fixture
def estimator_from_the_page(monkeypatch: pytest.MonkeyPatch):
    """The page's class, registered as if it were in oodmol.uq.estimators, for this test."""
    (title,) = [t for t in examples("uq.md") if t.startswith("src/oodmol/uq/estimators.py")]
    namespace = dict(vars(oodmol.uq.estimators))
    assert "bootstrap_mve" not in ESTIMATORS
    try:
        exec(compile(examples("uq.md")[title], "<docs example>", "exec"), namespace)
        yield ESTIMATORS["bootstrap_mve"]
    finally:
        ESTIMATORS.pop("bootstrap_mve", None)


def test_the_uq_example_is_a_bootstrap_of_mean_variance_models(
    tree: Path, tmp_path: Path, estimator_from_the_page
) -> None:
    add_config(tree, examples("uq.md"))
    cfg: DictConfig = compose_config("train", ["uq=bootstrap_mve", *csv_task(tmp_path)])
    estimator = estimator_from_config(cfg.uq)
    assert type(estimator) is estimator_from_the_page
    assert (estimator.members, estimator.resamples) == (5, True)
    likelihood = estimator.module_arguments()["likelihood"]
    assert isinstance(likelihood, GaussianLikelihood) and likelihood.min_variance == 1e-6
    assert cfg.uq.calibrators == ["zscaling", "conformal"]  # none.yaml's fields, inherited
    datamodule = build_datamodule(OmegaConf.merge(cfg, {"paths": {"data_dir": "unused"}}))
    assert datamodule.bootstrap_seed is not None  # each member on a bootstrap resample
    # the members' folder and the run's tag
    assert cfg.uq.run_tag == "+bootstrap_mve"
    assert json.loads(json.dumps(OmegaConf.to_container(cfg.uq.estimator))) == {
        "name": "bootstrap_mve",
        "min_variance": 1e-6,
    }
