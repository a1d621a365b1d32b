"""Doors found from outside that ended in a traceback, in Hydra's multi-line wrapper or
in a misleading message, each met as a user meets it: the real command line in a
subprocess (the Python API through its public calls), its exit status, the last line
of the terminal, no traceback.

The module's calls run side by side (`TinyTask.submit`); those that need a trained run
wait for the one the module trains first. Read-only folders are mounts in
a private mount namespace (`mount_helpers`); where the system does not allow one, those
tests are skipped, saying why.
"""

from __future__ import annotations

import pytest
from e2e_helpers import MLP, QUIET, Result, TinyTask
from mount_helpers import namespace_problem, read_only, run_with_mounts

pytestmark = pytest.mark.slow

HYDRA_WRAPPER = "Set the environment variable HYDRA_FULL_ERROR=1"


@pytest.fixture(scope="module")
def doors(tmp_path_factory: pytest.TempPathFactory):
    task = TinyTask.create(tmp_path_factory.mktemp("doors"))
    root = task.root

    def train(*args: str, model: list[str] = MLP) -> list[str]:
        return ["train.py", *task.task_args(), *QUIET, *model, *args]

    task.notes["train"] = train
    no_gpu = {"CUDA_VISIBLE_DEVICES": ""}
    task.submit("gpu", train("trainer=gpu", f"hydra.run.dir={root / 'gpu'}"), env=no_gpu)
    locked = root / "locked"
    (locked / "project").mkdir(parents=True)
    problem = namespace_problem(locked)
    task.notes["mount_problem"] = problem
    if problem is None:
        frozen = [read_only(locked)]
        task.submit(
            "read_only_folder",
            lambda: run_with_mounts(frozen, train(f"hydra.run.dir={locked / 'run'}"), task.env),
        )
        project = {**task.env, "PROJECT_ROOT": str(locked / "project")}
        task.submit("read_only_project", lambda: run_with_mounts(frozen, train(), project))
    yield task
    task.close()


def ends_in_one_line(result: Result, code: int) -> str:
    """The last line of the terminal, once the call ended with `code`, without a
    traceback or Hydra's wrapper."""
    shown = result.stdout + result.stderr
    assert result.returncode == code, result.output()
    assert "Traceback" not in shown and HYDRA_WRAPPER not in shown, result.output()
    return shown.strip().splitlines()[-1]


@pytest.fixture
def mounts(doors: TinyTask) -> TinyTask:
    if doors.notes["mount_problem"]:
        pytest.skip(doors.notes["mount_problem"])
    return doors


# ----------------------------------------------------------------- the machine


def test_a_read_only_run_folder_is_refused_before_anything_runs(mounts: TinyTask) -> None:
    folder = mounts.root / "locked" / "run"
    line = ends_in_one_line(mounts.result("read_only_folder"), 2)
    assert line == (
        f"[oodmol train] cannot write the run folder {folder}: {folder.parent} is on a "
        "read-only file system. Give hydra.run.dir=<a folder you can write>"
    )


def test_a_read_only_project_root_names_project_root(mounts: TinyTask) -> None:
    project = mounts.root / "locked" / "project"
    line = ends_in_one_line(mounts.result("read_only_project"), 2)
    assert line.startswith(f"[oodmol train] cannot write the run folder {project}/runs/tiny/")
    assert f"{project} is on a read-only file system" in line
    assert f"Runs go under PROJECT_ROOT={project}: set PROJECT_ROOT to a folder" in line


def test_trainer_gpu_without_a_gpu_is_refused_before_any_work(doors: TinyTask) -> None:
    line = ends_in_one_line(doors.result("gpu"), 2)
    assert line.startswith(
        "[oodmol train] trainer.accelerator=gpu asks for a GPU, and this machine has none "
        "that torch can use (CUDA_VISIBLE_DEVICES='' hides every GPU): run it on the CPU "
        "with trainer=cpu"
    )
    assert not (doors.root / "gpu").exists()
