"""Real epochs of every model, beside BOOM's Table 4, and what `experiment=boom` costs.

    python -m bench.gpu_epochs [--models mlp,chemprop,egnn,...] [--tasks csd10k_density,qm9_homo]
        [--epochs 3] [--budget-s 600] [--device cuda] [--out gpu_epochs.json] [--no-grid]

Each model trains for `--epochs` epochs (at most `--budget-s` seconds: Lightning's
`max_time`) on each task in a process of its own: a real `oodmol train` run (its data
module, batches, validation, checkpoints and logs), with `bench.gpu_epochs.EpochClock`
added as a callback, which times every training epoch with its validation, samples the
device's utilisation while it trains (`torch.cuda.utilization`, NVML; on the CPU the
process's CPU time over the wall-clock time, per thread), and records the peak memory.
Epochs are the run's own batches and set sizes (`split=ood`, the model's batch size), so
no per-batch estimate is involved; the first epoch (caches, compilation) is reported
apart from the median of the others.

The table gives seconds per epoch (median of epochs 2..), the first epoch, utilisation,
peak memory and the device, beside BOOM's Table 4 (its seconds per epoch and its device)
and their ratio; then the device-hours of `experiment=boom` (every model x task x 3 seeds
at the model's own epoch budget) from the measured epochs: a QM9 task's epochs from
`qm9_homo`'s, a 10k task's from `csd10k_density`'s, Lipophilicity's from the 10k
epoch scaled by training-set size; BOOM's from its Table 4 with its epoch budgets
(`protocol=boom`), over the 10 OOD tasks its table times. `--out` keeps what was
measured (a JSON file) and reuses it, so an interrupted bench resumes.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import lightning as L
import torch

from bench.grid_cost import BOOM_SECONDS, boom_grid, data_set, run_shape, split_sizes
from bench.harness import REPO

TASKS = "csd10k_density,qm9_homo"
SAMPLE_S = 0.5  # how often utilisation is sampled while training


class EpochClock(L.Callback):
    """Times each training epoch with its validation, samples utilisation while the run
    trains, and writes what it measured to `out` (JSON) when fitting ends. An epoch that
    `max_time` cut short is kept apart (`cut_s`): it ran only some of its batches."""

    def __init__(self, out: str) -> None:
        self.out = Path(out)
        self.epochs: list[float] = []
        self.cut: list[float] = []
        self._batches = 0
        self.utilisation: list[float] = []
        self._started = 0.0
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._started = time.perf_counter()
        self._batches = 0

    def on_train_batch_end(self, trainer: L.Trainer, *args) -> None:
        self._batches += 1

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking and self._started:
            whole = self._batches >= trainer.num_training_batches
            (self.epochs if whole else self.cut).append(time.perf_counter() - self._started)
            self._started = 0.0

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        device = trainer.strategy.root_device
        self._sampler = threading.Thread(target=self._sample, args=(device,), daemon=True)
        self._sampler.start()

    def _sample(self, device: torch.device) -> None:
        cpu, wall = time.process_time(), time.perf_counter()
        while not self._stop.wait(SAMPLE_S):
            if device.type == "cuda":
                try:
                    self.utilisation.append(float(torch.cuda.utilization(device)))
                except Exception:  # no NVML: nothing to sample
                    return
            else:
                now_cpu, now = time.process_time(), time.perf_counter()
                busy = (now_cpu - cpu) / (now - wall) / torch.get_num_threads()
                self.utilisation.append(100.0 * min(busy, 1.0))
                cpu, wall = now_cpu, now

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._stop.set()
        device = trainer.strategy.root_device
        if device.type == "cuda":
            peak = torch.cuda.max_memory_allocated(device) / 2**20
            name = torch.cuda.get_device_name(device)
        else:
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
            name = f"CPU, {torch.get_num_threads()} thread(s)"
        figures = {
            "epochs_s": self.epochs,
            "cut_s": self.cut,
            "utilisation_pct": statistics.median(self.utilisation) if self.utilisation else None,
            "peak_mb": peak,
            "device": name,
        }
        self.out.write_text(json.dumps(figures))


def measure(model: str, task: str, args: argparse.Namespace) -> dict:
    """One model's epochs on one task, in a train.py process of its own."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "clock.json"
        trainer = "gpu" if args.device == "cuda" else "cpu"
        hours, rest = divmod(int(args.budget_s), 3600)
        command = [
            sys.executable, "-m", "oodmol.apps.train", f"model={model}", f"task={task}",
            f"trainer={trainer}", f"model.max_epochs={args.epochs}", "test=false",
            f"+trainer.max_time=00:{hours:02d}:{rest // 60:02d}:{rest % 60:02d}",
            "+callbacks.epoch_clock._target_=bench.gpu_epochs.EpochClock",
            f"+callbacks.epoch_clock.out={out}", f"hydra.run.dir={Path(folder) / 'run'}",
            "progress=false", f"threads={args.threads}", *args.overrides,
        ]  # fmt: skip
        paths = [str(REPO), str(REPO / "src"), os.environ.get("PYTHONPATH", "")]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
        done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
        if done.returncode or not out.is_file():
            last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            return {"failed": f"exit {done.returncode}: {last[0][:200]}"}
        return json.loads(out.read_text())


def main() -> None:
    from oodmol.report.boom_reference import boom_paper

    models, grid_tasks, seeds = boom_grid()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(m for m in models if m != "rf"))
    parser.add_argument("--tasks", default=TASKS)
    parser.add_argument("--epochs", type=int, default=3, help="epochs a model trains for")
    parser.add_argument("--budget-s", type=int, default=600, help="at most, per model and task")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--out", type=Path, default=None, help="keep (and reuse) measurements")
    parser.add_argument(
        "--no-grid", action="store_true", help="leave out the device-hours of experiment=boom"
    )
    parser.add_argument("overrides", nargs="*", help="train.py overrides for every run")
    args = parser.parse_intermixed_args()  # overrides before and after the options

    table4 = boom_paper().tables["table4"].set_index("model")
    store = json.loads(args.out.read_text()) if args.out and args.out.is_file() else {}
    print("| model | task | s/epoch | first epoch s | utilisation % | peak MB | device | "
          "BOOM s/epoch | BOOM's device | BOOM / ours |")  # fmt: skip
    print("|" + "---|" * 10)
    epoch_s: dict[tuple[str, str], float] = {}
    for model in args.models.split(","):
        for task in args.tasks.split(","):
            key = f"{model}/{task}/{args.device}/{' '.join(args.overrides)}"
            if key not in store:
                store[key] = measure(model, task, args)
                if args.out:
                    args.out.write_text(json.dumps(store, indent=1))
            figures = store[key]
            if "failed" in figures or not figures["epochs_s"]:
                reason = figures.get("failed", "no epoch finished within the budget")
                print(f"| {model} | {task} | not measured: {reason} |||||||")
                continue
            epochs = figures["epochs_s"]
            steady = statistics.median(epochs[1:]) if len(epochs) > 1 else epochs[0]
            epoch_s[model, data_set(task)] = steady
            boom_model = model  # Table 4 as shipped names BOOM's models by ours
            family = data_set(task)
            boom_epoch = (
                table4.loc[boom_model, BOOM_SECONDS[family]]
                if boom_model in table4.index and family in BOOM_SECONDS
                else None
            )
            util = figures["utilisation_pct"]
            print(
                f"| {model} | {task} | {steady:.3g} | {epochs[0]:.3g} | "
                f"{'—' if util is None else f'{util:.0f}'} | {figures['peak_mb']:.0f} | "
                f"{figures['device']} | {'—' if boom_epoch is None else f'{boom_epoch:g}'} | "
                f"{table4.loc[boom_model, 'device'] if boom_epoch is not None else '—'} | "
                f"{'—' if boom_epoch is None else f'{boom_epoch / steady:.2g}'} |"
            )
    if not args.no_grid:
        grid_hours(epoch_s, grid_tasks, len(seeds), table4)


def grid_hours(epoch_s: dict, tasks: list[str], seeds: int, table4) -> None:
    """Device-hours of experiment=boom from the measured epochs, beside BOOM's."""
    ours_total = boom_total = 0.0
    lines = []
    for model in sorted({m for m, _ in epoch_s}):
        ours = boom = 0.0
        for task in tasks:
            family = data_set(task)
            measured = epoch_s.get((model, family))
            if measured is None and family == "lipophilicity" and (model, "csd10k") in epoch_s:
                scale = split_sizes(task)["train"] / split_sizes("csd10k_density")["train"]
                measured = epoch_s[model, "csd10k"] * scale
            if measured is None:
                continue
            ours += seeds * run_shape(model, task, "default")["epochs"] * measured
            if family in BOOM_SECONDS and model in table4.index:
                epochs = run_shape(model, task, "boom")["epochs"]
                boom += seeds * epochs * table4.loc[model, BOOM_SECONDS[family]]
        lines.append(f"| {model} | {ours / 3600:.3g} | {boom / 3600:.3g} |")
        ours_total += ours
        boom_total += boom
    print("\nexperiment=boom, device-hours (3 seeds, every task, each model's epochs):")
    print("| model | ours | BOOM (Table 4, its devices) |\n|---|---|---|")
    print("\n".join(lines))
    if boom_total:
        print(f"| all measured | {ours_total / 3600:.3g} | {boom_total / 3600:.3g} |")
        print(f"grid_hours_ours={ours_total / 3600:.4g} grid_hours_boom={boom_total / 3600:.4g}")


if __name__ == "__main__":
    main()
