"""End to end on a real SLURM cluster (`make test-slurm` starts a single-node one with
scripts/slurm_local.sh): a multirun through `hydra/launcher=slurm` equals the same sweep
run locally and feeds the leaderboard; a job pre-empted or warned of its time limit is
requeued and resumes from its last.ckpt to the uninterrupted run's predictions; a failing
job of an array leaves the others alone and the sweep names it; Lightning DDP runs as two
SLURM tasks of one job. Without a cluster every test skips, saying how to start one.

Jobs are the tiny CSV task's models (an MLP of 16 units, a forest of 10 trees) on one
CPU each; the machine's jobs share its CPUs, so the SLURM calls run side by side.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from e2e_helpers import (
    MLP,
    MORGAN,
    OOD_SIZE,
    QUIET,
    REPO,
    Result,
    TinyTask,
    hand_binned,
    hand_metrics,
    same_number,
    scored_rows,
)
from paths import HELPERS_PYTHONPATH
from slurm_helpers import Cluster, find_cluster

pytestmark = pytest.mark.slow

SWEEP = ["model=mlp,rf", "seed=0,1", *MORGAN, "model.max_epochs=2"]
# 6 batches an epoch, 4 epochs, dropout and a learning-rate schedule: the random state
# and the data order matter when a run resumes (as in test_run_lifecycle.py)
PREEMPTED = [
    "model=mlp",
    "model.module.backbone.hidden=[16]",
    "model.module.backbone.dropout=0.3",
    "model.batch_size=16",
    "model.max_epochs=4",
    "model.module.scheduler={_target_:torch.optim.lr_scheduler.ExponentialLR,"
    "_partial_:true,gamma:0.7}",
    *MORGAN,
]
PAUSE_STEP = 9  # in the middle of epoch 1
WAYS = {"time_limit": "SIGUSR2", "preempted": "SIGTERM"}


def launcher(cluster: Cluster, *extra: str) -> list[str]:
    return [
        "hydra/launcher=slurm",
        f"hydra.launcher.partition={cluster.partition}",
        "hydra.launcher.gpus_per_node=0",
        "hydra.launcher.cpus_per_task=1",
        "hydra.launcher.mem_gb=1",
        "hydra.launcher.timeout_min=15",
        *extra,
    ]


@pytest.fixture(scope="module")
def cluster() -> Cluster:
    found, why = find_cluster()
    if found is None:
        if os.environ.get("OODMOL_SLURM_REQUIRED"):  # make test-slurm: no silent skip
            pytest.fail(why)
        pytest.skip(why)
    return found


@pytest.fixture(scope="module")
def slurm(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory):
    # every call a fresh interpreter, as a cluster's job script starts it (these tests
    # run only where a cluster answers, so the zygote's forks are not held to them)
    task = TinyTask.create(tmp_path_factory.mktemp("slurm"), workers=8, forked=False)
    task.env |= {**cluster.env, "PYTHONPATH": HELPERS_PYTHONPATH}
    root = task.root
    single = ["train.py", *task.task_args(), *QUIET]
    multirun = ["train.py", "-m", *task.task_args(), *QUIET]
    task.notes["cluster"] = cluster

    sweep = [*multirun, *SWEEP]
    board = ["-m", "oodmol.cli", "report", str(root / "sweep_slurm"), "--out", str(root / "board")]
    task.submit_chain(
        ("sweep_slurm", [*sweep, *launcher(cluster), f"hydra.sweep.dir={root / 'sweep_slurm'}"]),
        ("report", board),
    )
    task.submit("sweep_local", [*sweep, f"hydra.sweep.dir={root / 'sweep_local'}"])

    failing = [*multirun, *MLP, "model.module.optimizer.lr=1e-3,1e30", *launcher(cluster)]
    task.submit("failing", [*failing, f"hydra.sweep.dir={root / 'sweep_failing'}"])

    if cluster.cpus >= 2:
        ddp = [*multirun, *MLP, "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2"]
        ddp += launcher(cluster, "hydra.launcher.tasks_per_node=2")
        task.submit("ddp", [*ddp, f"hydra.sweep.dir={root / 'sweep_ddp'}"])

    task.submit("reference", [*single, *PREEMPTED, f"hydra.run.dir={root / 'reference'}"])
    for way in WAYS:
        task.submit(way, lambda way=way: interrupted_sweep(task, cluster, way, multirun))
    yield task
    task.close()


def interrupted_sweep(task: TinyTask, cluster: Cluster, way: str, multirun: list[str]) -> Result:
    """A one-job sweep whose job pauses at PAUSE_STEP; there the test signals it as SLURM
    does before a time limit (`--signal=USR2@...`: submitit requeues the job itself) or
    when it pre-empts a job (SIGTERM, then SLURM requeues it)."""
    marker = task.root / f"{way}.json"
    pause = [
        "+callbacks.pause._target_=fault_helpers.PauseAtStep",
        f"+callbacks.pause.step={PAUSE_STEP}",
        f"+callbacks.pause.marker={marker}",
    ]
    args = [
        sys.executable,
        *multirun,
        *PREEMPTED,
        *pause,
        *launcher(cluster),
        f"hydra.sweep.dir={task.root / way}",
    ]
    out, err = (task.root / f"{way}.{n}" for n in ("out", "err"))
    started = time.monotonic()
    with out.open("w") as stdout, err.open("w") as stderr:
        proc = subprocess.Popen(args, cwd=REPO, env=task.env, stdout=stdout, stderr=stderr)
        try:
            while not marker.is_file() and proc.poll() is None:
                if time.monotonic() - started > 300:
                    raise TimeoutError(f"no job of {way} reached step {PAUSE_STEP} in 300 s")
                time.sleep(0.5)
            if marker.is_file():
                job = json.loads(marker.read_text())["job"]
                task.notes[way] = job
                cluster.command("scancel", f"--signal={WAYS[way]}", job)
                if way == "preempted":
                    cluster.wait_state(job, {""})  # it saved last.ckpt and ended (143)
                    cluster.command("scontrol", "requeue", job)
                cluster.start_soon(job)
            proc.wait(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
    seconds = time.monotonic() - started
    return Result(args, proc.returncode, out.read_text(), err.read_text(), seconds, started)


def metrics_of(folder: Path) -> dict:
    return json.loads((folder / "metrics.json").read_text())


def sweep_runs(sweep_dir: Path) -> dict[tuple[str, int], Path]:
    """(model, seed) -> run folder below a sweep folder."""
    runs = {}
    for path in sorted(sweep_dir.rglob("metrics.json")):
        metrics = json.loads(path.read_text())
        runs[(metrics["model"], metrics["seed"])] = path.parent
    return runs


def submitit_jobs(sweep_dir: Path) -> list[str]:
    """The ids of the jobs that ran (folders with a task's log; an array's own folder
    holds its submission script only)."""
    logs = (sweep_dir / ".submitit").glob("*/*_log.out")
    return sorted({p.parent.name for p in logs if p.name.startswith(p.parent.name + "_")})


def job_logs(sweep_dir: Path, job: str, streams: tuple[str, ...] = ("out", "err")) -> list[str]:
    """submitit's logs (stdout, stderr) of each task of a job, in task order."""
    outs = sorted((sweep_dir / ".submitit" / job).glob(f"{job}_*_log.out"))
    return ["".join(p.with_suffix(f".{s}").read_text() for s in streams) for p in outs]


# ---------------------------------------------------------------------- sweep on SLURM


def test_slurm_sweep_equals_the_local_sweep(slurm: TinyTask) -> None:
    result = slurm.result("sweep_slurm").ok()
    assert "4 jobs, 4 complete" in result.stdout
    local = slurm.result("sweep_local").ok()
    assert "4 jobs, 4 complete" in local.stdout
    runs, reference = (sweep_runs(slurm.root / n) for n in ("sweep_slurm", "sweep_local"))
    assert set(runs) == {(m, s) for m in ("mlp", "rf") for s in (0, 1)}
    assert set(reference) == set(runs)
    for key, folder in runs.items():
        assert (folder / "predictions.csv").read_bytes() == (
            reference[key] / "predictions.csv"
        ).read_bytes(), key
        assert metrics_of(folder)["ood"] == metrics_of(reference[key])["ood"], key
    # the jobs went through sbatch: one SLURM array, each job with its own task's files
    jobs = submitit_jobs(slurm.root / "sweep_slurm")
    assert len({job.split("_")[0] for job in jobs}) == 1 and len(jobs) == 4  # one array
    results = list((slurm.root / "sweep_slurm" / ".submitit").rglob("*_result.pkl"))
    assert len(results) == 4


def test_leaderboard_over_the_slurm_sweep(slurm: TinyTask) -> None:
    slurm.result("report").ok()
    board = slurm.root / "board"
    runs = pd.read_csv(board / "runs.csv")
    assert sorted(zip(runs["model_name"], runs["seed"], strict=True)) == [
        ("mlp", 0), ("mlp", 1), ("rf", 0), ("rf", 1),
    ]  # fmt: skip
    table = (board / "rmse.md").read_text()
    assert "mlp [shortened]" in table and "rf [shortened]" in table
    assert (board / "heatmap.png").is_file()


# --------------------------------------------------------------- pre-emption, requeue


@pytest.mark.parametrize("way", sorted(WAYS))
def test_requeued_job_resumes_to_the_uninterrupted_predictions(slurm: TinyTask, way: str) -> None:
    result = slurm.result(way).ok()
    assert "1 jobs, 1 complete" in result.stdout
    cluster, job = slurm.notes["cluster"], slurm.notes[way]
    assert cluster.job_field(job, "Restarts") == "1"  # SLURM ran it twice
    (log,) = job_logs(slurm.root / way, job, streams=("out",))
    first, second = log.split("Starting with JobEnvironment")[1:]  # one per attempt
    assert f"stopped by {WAYS[way]}; saved" in first and f"step {PAUSE_STEP}" in first
    if way == "time_limit":
        assert f"Requeued job {job}" in first  # submitit requeued it
    assert "results in" in second and "stopped by" not in second

    (folder,) = sweep_runs(slurm.root / way).values()
    hint = first.split("Resume with:\n")[1].splitlines()[0].strip()  # by hand, without SLURM
    assert hint.startswith("python train.py ")
    assert hint.endswith(f"hydra.run.dir={folder} resume=true")
    training = metrics_of(folder)["training"]
    assert training["attempts"] == 2
    resumed = training["resumes"][1]
    assert resumed["resumed_from"] == str(folder / "checkpoints" / "last.ckpt")
    assert (resumed["epoch"], resumed["step"]) == (1, PAUSE_STEP)

    reference = slurm.root / "reference"
    slurm.result("reference").ok()
    for name in ("predictions.csv", "csv/metrics.csv"):
        assert (folder / name).read_bytes() == (reference / name).read_bytes(), name
    assert metrics_of(folder)["ood"] == metrics_of(reference)["ood"]


# ------------------------------------------------------------------- a failing job


def test_failing_job_leaves_the_array_going_and_is_named(slurm: TinyTask) -> None:
    result = slurm.result("failing").failed()  # the sweep ends non-zero
    found = [metrics_of(p.parent) for p in (slurm.root / "sweep_failing").rglob("metrics.json")]
    statuses = sorted((m["status"], m.get("failure", {}).get("kind")) for m in found)
    assert statuses == [("complete", None), ("failed", "TrainingDiverged")]
    summary = result.stdout[result.stdout.index("[oodmol] sweep ") :]
    assert "2 jobs, 1 complete, 1 failed" in summary
    failed = summary.split("FAILED: ")[1].splitlines()
    assert failed[0] == "model.module.optimizer.lr=1e+30"  # as Hydra writes it
    assert "reason: TrainingDiverged: training diverged at epoch 0" in summary
    log = Path(next(line.split("log: ")[1] for line in failed if "log: " in line))
    assert log.is_file() and log.parent.parent.name == ".submitit"


# ------------------------------------------------------------------------------ DDP


def test_ddp_runs_as_two_slurm_tasks_into_one_result(slurm: TinyTask) -> None:
    if slurm.notes["cluster"].cpus < 2:
        pytest.skip("the cluster's node has fewer than 2 CPUs: no room for 2 tasks")
    slurm.result("ddp").ok()
    sweep_dir = slurm.root / "sweep_ddp"
    (job,) = submitit_jobs(sweep_dir)
    logs = job_logs(sweep_dir, job)
    assert len(logs) == 2
    for rank, log in enumerate(logs):  # each SLURM task is one DDP process, none spawned
        assert f"global_rank={rank}(2)" in log
        assert f"GLOBAL_RANK: {rank}, MEMBER: {rank + 1}/2" in log
    (metrics_file,) = sweep_dir.rglob("metrics.json")
    metrics = metrics_of(metrics_file.parent)
    sizes = metrics["data"]["sizes"]
    assert metrics["ood"]["n"] == sizes["ood"] == OOD_SIZE
    rows = scored_rows(pd.read_csv(metrics_file.parent / "predictions.csv"))
    assert not rows["mol_id"].duplicated().any()
    assert rows["set"].value_counts().to_dict() == {"id": sizes["id"], "ood": sizes["ood"]}
    ood = rows[rows["set"] == "ood"]
    expected = hand_metrics(ood["y_true"], ood["y_pred"])
    expected |= hand_binned(ood["y_true"], ood["y_pred"], metrics["train_median"])
    for key, value in expected.items():
        assert same_number(metrics["ood"][key], value), key
