"""Doors found from outside that ended in a traceback, in Hydra's multi-line wrapper or
in a misleading message, each met as a user meets it: the real command line in a
subprocess (the Python API through its public calls), its exit status, the last line
of the terminal, no traceback; where the message says what to do, doing it works.

The module's calls run side by side (`TinyTask.submit`); those that need a trained run
wait for the one the module trains first. Read-only folders and a full disk are mounts in
a private mount namespace (`mount_helpers`); where the system does not allow one, those
tests are skipped, saying why.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path

import lmdb
import numpy as np
import pandas as pd
import pytest
from e2e_helpers import (
    MLP,
    MORGAN,
    QUIET,
    REPO,
    TASK_NAME,
    Result,
    TinyTask,
    ends_in_one_line,
)
from mount_helpers import namespace_problem, read_only, run_with_mounts, small_disk
from paths import HELPERS_PYTHONPATH

pytestmark = pytest.mark.slow

HELPERS = {"PYTHONPATH": HELPERS_PYTHONPATH}
# an MLP on Morgan bits whose feature cache is larger than the small disk
BIG_CACHE = [
    "model=mlp",
    "model.module.backbone.hidden=[16]",
    MORGAN[0],
    "+model.featurizer.n_bits=4096",
]
MLP_BITS = int(MORGAN[1].rsplit("=", 1)[1])  # the fingerprint length of MLP's features
KRR = ["model=krr_rbf", "model/representation=ecfp4"]
KERNEL_SETTINGS = {
    "no_alphas": "model.module.alphas=[]",
    "negative_alpha": "model.module.alphas=[-1,1]",
    "unknown_kernel": "model.module.kernel=cosine",
    "one_fold": "model.module.folds=1",
}
KEY = "sk-live-0123456789abcdef"  # an API key that must never be shown or written
KEY_OVERRIDES = {
    "api_key": f"openai.api_key={KEY}",
    "added_api_key": f"+openai.api_key={KEY}",
    "key_as_variable": f"openai.api_key_env={KEY}",
}


@pytest.fixture(scope="module")
def doors(tmp_path_factory: pytest.TempPathFactory):
    task = TinyTask.create(tmp_path_factory.mktemp("doors"))

    def train(*args: str, model: list[str] = MLP) -> list[str]:
        return ["train.py", *task.task_args(), *QUIET, *model, *args]

    submit_run_folder_doors(task, train)
    submit_machine_doors(task, train)
    for name, setting in KERNEL_SETTINGS.items():
        folder = task.root / "kernel" / name
        task.submit(f"kernel_{name}", train(setting, f"hydra.run.dir={folder}", model=KRR))
    for name, override in KEY_OVERRIDES.items():
        out = task.root / "llm" / name / "answers.csv"
        llm = ["-m", "oodmol.cli", "llm", *task.task_args(), "backend=openai"]
        task.submit(f"llm_{name}", [*llm, "openai.model=m", override, f"out={out}"])
    yield task
    task.close()


def submit_run_folder_doors(task: TinyTask, train) -> None:
    """The trained run, then the doors that start from it, one after another (they copy
    its folder or its data); a run training now beside them."""
    root = task.root
    trained = root / "trained"
    task.notes["trained"] = trained
    data = root / "damaged_data"
    other_csv = root / "other.csv"
    task.molecules.head(100).to_csv(other_csv, index=False)
    same_name = [
        "task=csv",
        f"task.path={other_csv}",
        "task.target_column=y",
        "task.ood_size=20",
        f"++task.name={TASK_NAME}",
    ]
    evaluate = ["evaluate.py", f"ckpt_path={trained / 'checkpoints' / 'best.ckpt'}", *QUIET]
    task.submit_chain(
        ("trained", train(f"hydra.run.dir={trained}")),
        ("empty_last", lambda: broken_last(task, train, "empty", lambda p: p.write_bytes(b""))),
        ("linked_last", lambda: broken_last(task, train, "linked", link_to(task.csv))),
        ("other_task", [*evaluate, *same_name, f"hydra.run.dir={root / 'other_task'}"]),
        ("damaged_cache", lambda: damaged_feature_cache(task, train, data)),
        ("rebuilt_cache", lambda: as_advised(task, train(f"hydra.run.dir={root / 'rebuilt'}"))),
        ("table_and_split", lambda: damaged_table_and_split(task, train)),
    )
    go = root / "live.go"
    wait = [
        "+callbacks.wait._target_=fault_helpers.WaitForFile",
        f"+callbacks.wait.path={go}",
        "+callbacks.wait.epoch=1",
    ]
    task.submit("live", lambda: second_run_beside_a_live_one(task, train(*wait), go))


def submit_machine_doors(task: TinyTask, train) -> None:
    """A machine without a GPU; read-only folders and a small disk, where they can be
    mounted."""
    root = task.root
    no_gpu = {"CUDA_VISIBLE_DEVICES": ""}
    task.submit("gpu", train("trainer=gpu", f"hydra.run.dir={root / 'gpu'}"), env=no_gpu)
    locked = root / "locked"
    (locked / "project").mkdir(parents=True)
    task.notes["mount_problem"] = problem = namespace_problem(locked)
    if problem is not None:
        return
    frozen = [read_only(locked)]
    into_locked = train(f"hydra.run.dir={locked / 'run'}")
    task.submit("read_only_folder", lambda: run_with_mounts(frozen, into_locked, task.env))
    project = {**task.env, "PROJECT_ROOT": str(locked / "project")}
    task.submit("read_only_project", lambda: run_with_mounts(frozen, train(), project))
    disk = root / "small_disk"
    disk.mkdir()
    on_disk = {**task.env, "OODMOL_DATA_DIR": str(disk)}
    big = train(f"hydra.run.dir={root / 'full'}", model=BIG_CACHE)
    task.submit("full_disk", lambda: run_with_mounts([small_disk(disk, "600k")], big, on_disk))


def broken_last(task: TinyTask, train, name: str, damage) -> Result:
    """train.py, plain, into a copy of the trained run left as an interrupted one (no
    metrics.json) whose last.ckpt `damage` broke."""
    folder = task.root / f"{name}_last"
    shutil.copytree(task.notes["trained"], folder)
    (folder / "metrics.json").unlink()
    last = folder / "checkpoints" / "last.ckpt"
    last.unlink()
    damage(last)
    return task.run(train(f"hydra.run.dir={folder}"))


def link_to(target: Path):
    return lambda path: path.symlink_to(target)


def damaged_feature_cache(task: TinyTask, train, data: Path) -> Result:
    """train.py on a copy of the module's caches whose feature cache has one record
    overwritten and was sealed again: the damage passes the seal's check."""
    shutil.copytree(task.data_dir, data, ignore=shutil.ignore_patterns("*.lock"))
    cache = next(c for c in (data / "features").glob("*.lmdb") if morgan_bits(c) == MLP_BITS)
    env = lmdb.open(str(cache), subdir=False, lock=False)
    with env.begin(write=True) as txn:
        key, value = next((k, v) for k, v in txn.cursor() if k != b"__meta__")
        txn.put(key, b"\xff" * len(value))
    env.close()
    raw = cache.read_bytes()
    seal = {"size": len(raw), "crc32": zlib.crc32(raw)}
    cache.with_name(cache.name + ".seal").write_text(json.dumps(seal))
    task.notes["damaged_cache"] = cache
    task.notes["damaged_mol_id"] = int.from_bytes(key, "big", signed=True)
    return task.run(train(f"hydra.run.dir={task.root / 'on_damaged'}"), on_data(data))


def morgan_bits(cache: Path) -> int | None:
    """The fingerprint length a feature cache holds (the kernel models' ECFP4 may be
    cached beside the MLP's Morgan bits)."""
    env = lmdb.open(str(cache), subdir=False, readonly=True, lock=False)
    with env.begin() as txn:
        meta = json.loads(txn.get(b"__meta__"))
    env.close()
    return meta["featurizer"]["params"].get("n_bits")


def damaged_table_and_split(task: TinyTask, train) -> Result:
    """train.py on a copy of the module's caches whose data set report and split file
    hold valid JSON of the wrong kinds where neither's check looks (the report's counts,
    the split's info), as a disk or an editor could leave them."""
    data = task.root / "table_and_split"
    shutil.copytree(task.data_dir, data, ignore=shutil.ignore_patterns("*.lock"))
    (report,) = (data / "tables").glob("*/report.json")
    (split,) = (data / "splits").glob("*/*.json")
    for path, change in ((report, {"n_read": "many"}), (split, {"info": "lost"})):
        path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    task.notes["damaged_files"] = report.parent, split
    return task.run(train(f"hydra.run.dir={task.root / 'on_repaired'}"), on_data(data))


def as_advised(task: TinyTask, command: list[str]) -> Result:
    """The damaged cache and its seal deleted, as the refusal says, and the run again."""
    cache = task.notes["damaged_cache"]
    cache.unlink()
    cache.with_name(cache.name + ".seal").unlink()
    return task.run(command, on_data(cache.parent.parent))


def on_data(folder: Path) -> dict[str, str]:
    return {"OODMOL_DATA_DIR": str(folder)}


def second_run_beside_a_live_one(task: TinyTask, command: list[str], go: Path) -> tuple:
    """A run that stands still once its first epoch's checkpoints are saved (until `go`
    exists), and meanwhile the same command again on its folder. Returns the first
    run's pid and result, and the second's result."""
    folder = task.root / "live"
    command = [*command, f"hydra.run.dir={folder}"]
    env = {**task.env, **HELPERS}
    args = [sys.executable, *command]
    first = subprocess.Popen(
        args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 300
        last = folder / "checkpoints" / "last.ckpt"
        while not last.is_file() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        second = task.run(command, HELPERS)
    finally:
        go.touch()
    stdout, stderr = first.communicate(timeout=480)
    return first.pid, Result(args, first.returncode, stdout, stderr), second


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


def test_a_full_disk_while_writing_a_feature_cache_says_so(mounts: TinyTask) -> None:
    disk, folder = mounts.root / "small_disk", mounts.root / "full"
    line = ends_in_one_line(mounts.result("full_disk"), 1)
    assert line.startswith(
        f"[oodmol train] run failed: no space left on device (ENOSPC) writing {disk}/features/"
    )
    assert "Free some space, then resume: python train.py " in line
    assert f"hydra.run.dir={folder} resume=true" in line


# -------------------------------------------------------- caches and checkpoints


def test_a_damaged_feature_cache_that_passes_its_seal_is_refused(doors: TinyTask) -> None:
    result = doors.result("damaged_cache")
    cache, mol_id = doors.notes["damaged_cache"], doors.notes["damaged_mol_id"]
    line = ends_in_one_line(result, 2)
    assert line.startswith(
        f"[oodmol train] feature cache {cache} is damaged (the record of mol_id {mol_id}: "
    )
    assert line.endswith(
        f"although it matches its seal: delete it and {cache.name}.seal beside it, then run "
        "again to rebuild it"
    )


def test_following_the_damaged_cache_advice_rebuilds_it(doors: TinyTask) -> None:
    doors.result("rebuilt_cache").ok()
    cache = doors.notes["damaged_cache"]
    assert cache.is_file() and cache.with_name(cache.name + ".seal").is_file()


def test_damaged_table_and_split_caches_are_rebuilt(doors: TinyTask) -> None:
    result = doors.result("table_and_split").ok()
    table, split = doors.notes["damaged_files"]
    shown = result.stdout + result.stderr
    assert f"data set cache {table} is damaged (" in shown and "rebuilding it" in shown
    assert f"split file {split} is unusable (" in shown and "recomputing it" in shown
    assert json.loads((table / "report.json").read_text())["n_read"] == len(doors.molecules)
    assert isinstance(json.loads(split.read_text())["info"], dict)


def test_an_empty_last_checkpoint_says_so(doors: TinyTask) -> None:
    last = doors.root / "empty_last" / "checkpoints" / "last.ckpt"
    line = ends_in_one_line(doors.result("empty_last"), 2)
    assert line == (
        f"[oodmol train] {last} is empty (0 bytes), not a checkpoint; this run cannot go on "
        "from it: delete that file to start over"
    )
    assert "mmap" not in line


def test_a_last_checkpoint_linked_to_a_text_file_says_so(doors: TinyTask) -> None:
    last = doors.root / "linked_last" / "checkpoints" / "last.ckpt"
    line = ends_in_one_line(doors.result("linked_last"), 2)
    assert line == (
        f"[oodmol train] {last} (a link to {doors.csv}) cannot be read as a checkpoint: it "
        "does not start like one (a text file, or another kind of file?); this run cannot "
        "go on from it: delete that file to start over"
    )


def test_a_checkpoint_scored_on_other_data_of_the_same_name_is_refused(doors: TinyTask) -> None:
    line = ends_in_one_line(doors.result("other_task"), 2)
    assert "was trained on task=tiny split=ood; scoring it on task=tiny (the same name, " in line
    assert "add allow_other_task=true" in line


# ------------------------------------------------------------ a run training now


def test_a_run_training_now_is_never_called_interrupted(doors: TinyTask) -> None:
    first_pid, first, second = doors.result("live")
    folder = doors.root / "live"
    line = ends_in_one_line(second, 2)
    assert line.startswith(
        f"[oodmol train] {folder} is in use by another run, training into it now (pid "
        f"{first_pid} on "
    )
    assert "interrupted" not in second.stdout + second.stderr
    first.ok()
    assert json.loads((folder / "metrics.json").read_text())["status"] == "complete"


# -------------------------------------------------------------- model settings


@pytest.mark.parametrize(
    ("name", "phrase"),
    [
        ("no_alphas", "model.module.alphas=[]: the regularisations to try must be one or more "),
        ("negative_alpha", "model.module.alphas=[-1, 1]: the regularisations to try must be "),
        ("unknown_kernel", "model.module.kernel='cosine': there is no such kernel; one of rbf, "),
        ("one_fold", "model.module.folds=1: the nested search's k-fold cross-validation needs "),
    ],
)
def test_kernel_settings_out_of_range_are_refused(doors: TinyTask, name: str, phrase: str) -> None:
    line = ends_in_one_line(doors.result(f"kernel_{name}"), 2)
    assert line.startswith(f"[oodmol train] {phrase}")
    assert "needs at least 2 training molecules" not in line


# ------------------------------------------------------------------ API keys


@pytest.mark.parametrize("name", list(KEY_OVERRIDES))
def test_an_api_key_on_the_command_line_is_refused_unshown(doors: TinyTask, name: str) -> None:
    result = doors.result(f"llm_{name}")
    line = ends_in_one_line(result, 2)
    setting = KEY_OVERRIDES[name].split("=")[0].lstrip("+")
    assert line.startswith(f"[oodmol llm] {setting}=…: ")
    assert "export OPENAI_API_KEY=<key>" in line
    assert KEY not in result.stdout + result.stderr
    assert not (doors.root / "llm" / name).exists()


# ---------------------------------------------------------------- the Python API


@pytest.fixture(scope="module")
def benchmark_task(doors: TinyTask):
    from oodmol import benchmark

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OODMOL_DATA_DIR", str(doors.data_dir))
        yield benchmark.load(
            "csv", path=doors.csv, target_column="y", overrides=["task.ood_size=20"]
        )


def predictions(task) -> dict[str, np.ndarray]:
    return {s: task.test[s]["target"].to_numpy() + 0.1 for s in ("id", "ood")}


def test_api_refuses_none_for_predictions_or_task(benchmark_task) -> None:
    from oodmol import benchmark
    from oodmol.errors import UserError

    no_predictions = "predictions must be a dict of sets, {'id': ..., 'ood': ...}, not None"
    no_task = "task must be a BenchmarkTask (benchmark.load(...)), not a NoneType"
    refusals = (
        (lambda: benchmark_task.evaluate(None), no_predictions),
        (lambda: benchmark.evaluate(benchmark_task, None), no_predictions),
        (lambda: benchmark.evaluate(None), no_task),
    )
    for call, message in refusals:
        with pytest.raises(UserError) as refused:
            call()
        assert str(refused.value) == message


def test_api_refuses_a_file_as_save_to(benchmark_task, tmp_path: Path) -> None:
    from oodmol.errors import UserError

    file = tmp_path / "results.csv"
    file.write_text("kept\n")
    for given, where in ((file, "is"), (file / "runs", f"is inside {file}, which is")):
        with pytest.raises(UserError) as refused:
            benchmark_task.evaluate(predictions(benchmark_task), save_to=given)
        assert str(refused.value) == (
            f"save_to={str(given)!r} {where} a file: save_to names the runs folder the "
            "results are written under (created if missing, e.g. save_to='runs')"
        )
    assert file.read_text() == "kept\n"


def test_api_hints_that_a_series_is_read_by_mol_id(benchmark_task) -> None:
    from oodmol.benchmark import PredictionError

    values = predictions(benchmark_task)
    with pytest.raises(PredictionError) as refused:
        benchmark_task.evaluate({s: pd.Series(v) for s, v in values.items()})
    message = str(refused.value)
    assert "a Series is read by its index as mol_ids, and this one has pandas' default" in message
    assert "pd.Series(values, index=task.test['id']['mol_id'])" in message
    assert "\n" not in message
    indexed = {s: pd.Series(v, index=benchmark_task.test[s]["mol_id"]) for s, v in values.items()}
    assert benchmark_task.evaluate(indexed)["ood"] == benchmark_task.evaluate(values)["ood"]
