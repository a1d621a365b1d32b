"""scripts/: each one runs from any folder, explains itself, and does what it says.

The scripts are run as a user would, by path from another folder, with PYTHON set to
this interpreter."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from paths import REPO

ROOT = REPO
SCRIPTS = ROOT / "scripts"
ALL = ("prepare_data.sh", "boom_grid_slurm.sh", "cluster_example.sbatch", "slurm_local.sh")


def run_script(name: str, *args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(SCRIPTS / name), *args],
        cwd=cwd,
        env={**os.environ, "PYTHON": sys.executable, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def boom_grid_sizes() -> dict[str, int]:
    """How many values each sweep param of configs/experiment/boom.yaml lists; its tasks
    are the task YAMLs that say `benchmark: boom` (BOOM's 10 and Lipophilicity)."""
    experiment = yaml.safe_load((ROOT / "configs" / "experiment" / "boom.yaml").read_text())
    params = experiment["hydra"]["sweeper"]["params"]
    sizes = {key: len(str(values).split(",")) for key, values in params.items()}
    tasks = [yaml.safe_load(p.read_text()) for p in (ROOT / "configs" / "task").glob("*.yaml")]
    sizes["task"] = sum(task.get("benchmark") == "boom" for task in tasks)
    assert sizes["task"] == 11
    return sizes


@pytest.mark.parametrize("name", ALL)
def test_help_explains_usage(name: str, tmp_path: Path) -> None:
    result = run_script(name, "--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Usage:")


def test_dry_run_prints_the_command_and_counts_the_whole_grid(tmp_path: Path) -> None:
    result = run_script(
        "boom_grid_slurm.sh", "--dry-run", "-p", "gpu", "-A", "chem", "-t", "90", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    command, count = result.stdout.strip().splitlines()
    assert f"{sys.executable} train.py -m experiment=boom hydra/launcher=slurm" in command
    for override in ("partition=gpu", "account=chem", "timeout_min=90"):
        assert f" hydra.launcher.{override} " in command
    assert command.rstrip().endswith("trainer=gpu")
    assert count == f"{math.prod(boom_grid_sizes().values())} jobs"


def test_dry_run_takes_options_from_the_environment_and_overrides_reshape_the_grid(
    tmp_path: Path,
) -> None:
    result = run_script(
        "boom_grid_slurm.sh",
        "-n",
        "--",
        "model=rf,mlp",
        "seed=0",
        cwd=tmp_path,
        OODMOL_SLURM_PARTITION="short",
        OODMOL_SLURM_GPUS="0",
    )
    assert result.returncode == 0, result.stderr
    command, count = result.stdout.strip().splitlines()
    assert " hydra.launcher.partition=short " in command
    assert " hydra.launcher.gpus_per_node=0 trainer=cpu " in command
    assert count == f"{2 * boom_grid_sizes()['task']} jobs"


def test_sbatch_directives_sit_above_the_first_command() -> None:
    """sbatch reads #SBATCH lines only until the first command: one below it would be
    silently ignored, and the job would never be signalled or requeued."""
    directives = []
    for line in (SCRIPTS / "cluster_example.sbatch").read_text().splitlines()[1:]:
        if line.strip() and not line.startswith("#"):
            break
        if line.startswith("#SBATCH "):
            directives.append(line.removeprefix("#SBATCH ").strip())
    assert {"--signal=USR1@120", "--requeue", "--open-mode=append"} <= set(directives)


@pytest.mark.slow
def test_prepare_data_writes_the_split_and_the_feature_cache(
    source_dir: Path, tmp_path: Path
) -> None:
    """A relative OODMOL_DATA_DIR means the caller's folder, not the repository."""
    result = run_script(
        "prepare_data.sh",
        "--tasks",
        "lipophilicity",
        "--splits",
        "ood",
        "--featurizers",
        "morgan",
        "--",
        "progress=false",
        cwd=tmp_path,
        OODMOL_SOURCE_DIR=str(source_dir),
        OODMOL_DATA_DIR="data",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    data = tmp_path / "data"
    assert len(list((data / "splits" / "lipophilicity").glob("ood-*.json"))) == 1
    caches = list((data / "features").glob("lipophilicity-morgan-*.lmdb"))
    assert len(caches) == 1
    assert caches[0].with_name(caches[0].name + ".seal").is_file()
    assert "morgan features: 4200 molecules" in result.stdout


def test_scripts_are_shellcheck_clean() -> None:
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (apt-get install shellcheck)")
    result = subprocess.run(
        ["shellcheck", *(str(SCRIPTS / name) for name in ALL)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout


def test_local_slurm_stops_only_the_daemons_it_started(tmp_path: Path) -> None:
    """A stale pid file (left by an earlier start of the cluster, the pid reused since)
    names a process that is not this cluster's daemon: status reports nothing running,
    stop leaves it alone."""
    folder = tmp_path / "cluster"
    (folder / "run").mkdir(parents=True)
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        for daemon in ("munged", "slurmctld", "slurmd"):
            (folder / "run" / f"{daemon}.pid").write_text(f"{stranger.pid}\n")
        status = run_script("slurm_local.sh", "status", cwd=tmp_path, OODMOL_SLURM_DIR=str(folder))
        assert status.returncode == 3, status.stderr
        assert "slurmctld: not running" in status.stdout
        assert f"the cluster in {folder} is not up" in status.stdout
        stop = run_script("slurm_local.sh", "stop", cwd=tmp_path, OODMOL_SLURM_DIR=str(folder))
        assert stop.returncode == 0, stop.stderr
        assert "stopped" not in stop.stdout
        assert stranger.poll() is None  # still running
    finally:
        stranger.kill()
        stranger.wait()
