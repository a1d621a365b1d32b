"""The configuration key that names a run's folder: equal for runs that must share a folder,
different for runs that must not, and the same wherever it is computed (by Hydra naming
the folder, by the run, from a checkpoint's saved config)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import InstantiationException
from omegaconf import open_dict

from oodmol.config import compose_config, config_dir
from oodmol.data.task import csv_task
from oodmol.identity import config_key, describe, run_identity


@pytest.fixture
def csv_file(tmp_path: Path) -> Path:
    path = tmp_path / "mine.csv"
    path.write_text("smiles,y\nCCO,1.0\nCCN,2.0\n")
    return path


def key(*overrides: str) -> str:
    return config_key(compose_config("train", list(overrides)))


def test_execution_settings_and_seeds_share_a_key() -> None:
    base = key()
    for same in (
        ["seed=3"],
        ["threads=1", "progress=false", "num_workers=2", "data_on_device=false"],
        ["logger=wandb"],
        ["trainer=ddp"],
        ["resume=true", "ckpt_path=x.ckpt"],
        ["paths.log_dir=/elsewhere"],
        ["uq=ensemble", "uq.member=2"],
        ["uq=ensemble", "uq.parallel=3"],
    ):
        if same[0].startswith("uq"):
            assert key(*same) == key("uq=ensemble"), same
        else:
            assert key(*same) == base, same


def test_a_kernel_models_seeds_share_a_key_and_draw_its_search() -> None:
    """The search's folds, subset and landmarks are drawn with the run's seed: seeds of
    one kernel configuration sit side by side, each with its own draw."""
    assert key("model=krr_rbf", "seed=2") == key("model=krr_rbf", "seed=0")
    config = compose_config("train", ["model=krr_rbf", "seed=2"])
    assert config.model.module.cv_seed == 2
    pinned = ["model=krr_rbf", "model.module.cv_seed=0"]
    assert key(*pinned) != key("model=krr_rbf")


def test_result_settings_change_the_key() -> None:
    keys = {
        key(*o)
        for o in (
            [],
            ["model=rf"],
            ["model.max_epochs=2"],
            ["model.module.backbone.hidden=[16]"],
            ["max_molecules=64"],
            ["split=random"],
            ["task=csd10k_hof"],
            ["uq=mve"],
            ["callbacks.model_checkpoint.mode=max"],
        )
    }
    assert len(keys) == 9


def test_csv_task_is_identified_by_its_content(csv_file: Path, tmp_path: Path) -> None:
    task = ["task=csv", f"task.path={csv_file}", "task.target_column=y"]
    first = key(*task)
    copy = tmp_path / "elsewhere.csv"
    copy.write_bytes(csv_file.read_bytes())
    assert key("task=csv", f"task.path={copy}", "task.target_column=y") == first
    csv_file.write_text("smiles,y\nCCO,1.0\nCCN,2.5\n")
    assert key(*task) != first  # same path and column, other data: another folder


def test_key_is_the_same_for_hydra_and_the_run(csv_file: Path) -> None:
    """Hydra names the folder from the whole config (hydra node included), the run
    checks the folder from its own config (with its run folder set)."""
    overrides = ["task=csv", f"task.path={csv_file}", "task.target_column=y", "model=rf"]
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        with_hydra = compose("train", overrides, return_hydra_config=True)
        run = compose("train", [*overrides, "paths.output_dir=/runs/x", "seed=4"])
    assert config_key(with_hydra) == config_key(run)


def test_changed_csv_file_is_refused(csv_file: Path) -> None:
    checksum = compose_config(
        "train", ["task=csv", f"task.path={csv_file}", "task.target_column=y"]
    ).task.checksum
    csv_file.write_text("smiles,y\nCCO,9.0\n")
    with pytest.raises(ValueError, match="changed since this run was configured"):
        csv_task(str(csv_file), "y", checksum=checksum)


def test_identity_names_a_run() -> None:
    identity = run_identity(compose_config("train", ["model=rf", "seed=2", "max_molecules=5"]))
    assert describe(identity) == ("task=csd10k_density split=ood model=rf seed=2 max_molecules=5")


def test_the_geometry_changes_the_key_of_3d_models_only() -> None:
    """conformers=mmff is what 3D models read before geometries could be chosen: their
    keys (and those of every other model) stay; xtb gives 3D models a key of their own;
    a model that reads no geometry keeps its key whatever is chosen."""
    assert key("model=schnet", "conformers=mmff") == key("model=schnet")
    assert key("model=schnet", "conformers=xtb") != key("model=schnet")
    assert key("model=mlp", "conformers=xtb") == key("model=mlp")
    assert key("model=schnet", "geometry_filter=[mmff,xtb]") != key("model=schnet")
    assert key("model=mlp", "geometry_filter=[mmff,xtb]") != key("model=mlp")
    assert key("model=schnet", "geometry_filter=null") == key("model=schnet")


def test_the_optimisers_threads_leave_the_key_its_settings_do_not() -> None:
    """How many threads optimise a geometry changes how fast, not where it ends."""
    xtb = key("model=schnet", "conformers=xtb")
    assert key("model=schnet", "conformers=xtb", "conformers.optimizer.threads=4") == xtb
    assert key("model=schnet", "conformers=xtb", "conformers.optimizer.max_steps=10") != xtb


def test_the_physics_estimates_version_is_part_of_the_key() -> None:
    """A run that read the estimates of another version of their code is another run
    (the feature cache is keyed by the version; the run's key must be too)."""
    from hydra.utils import instantiate

    from oodmol.data.featurize.physics import PhysicsEstimates

    cfg = compose_config("train", ["model=ridge", "model/representation=physics"])
    assert cfg.model.featurizer.estimates_version == PhysicsEstimates.version
    assert instantiate(cfg.model.featurizer).version == PhysicsEstimates.version
    older = f"{PhysicsEstimates.version - 1}"
    for run, setting in (
        (["model=ridge", "model/representation=physics"], "model.representation.featurizer"),
        (["model=mean"], "baseline.featurizer"),
    ):
        delta = [*run, "baseline=physics", "task=qm9_homo"]
        assert key(*delta, f"{setting}.estimates_version={older}") != key(*delta)
    cfg.model.featurizer.estimates_version = int(older)
    with pytest.raises(
        InstantiationException, match=f"computes version {PhysicsEstimates.version}"
    ):
        instantiate(cfg.model.featurizer)


def test_the_baselines_least_squares_line_keeps_the_key_it_had_before_the_choice() -> None:
    """Δ runs made before `baseline.fit` existed fitted least squares: the setting at that
    value leaves the key and identity as they were; the calibration line changes both."""
    delta = ["model=mean", "baseline=physics", "task=qm9_homo"]
    cfg = compose_config("train", delta)
    assert cfg.baseline.fit == "least_squares"
    before = compose_config("train", delta)
    with open_dict(before):
        del before.baseline["fit"]
    assert config_key(cfg) == config_key(before)
    assert run_identity(cfg) == run_identity(before)
    calibrated = compose_config("train", [*delta, "baseline.fit=calibration"])
    assert config_key(calibrated) != config_key(cfg)
    assert run_identity(calibrated) != run_identity(cfg)
