"""What a command costs before its work, in a process that imported what train.py imports
(as a forked run does): composing train.yaml with OmegaConf's pure Python YAML loader
against its rules over libyaml's parser, and a tiny training run through train.py's door
with Hydra composing the config again to read the run mode against Hydra handed the mode
the door read. Side by side in one process, alternating.

    python -m bench.door_start [--repeats 5]

Columns: seconds per composition (24 of them, each one override) and per tiny run (a
two-layer MLP, one epoch on 60 molecules of a CSV file), median and max over `--repeats`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import runpy
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import omegaconf._utils
from hydra import compose, initialize_config_dir

import oodmol.apps.hydra_app
import oodmol.apps.train  # what a forked run has imported
import oodmol.training.run
from oodmol.config import OMEGACONF_PURE_PYTHON_LOADER, config_dir

OVERRIDES = ("model=mlp", "model=chemprop", "model=schnet", "task=qm9_homo")
OVERRIDES += ("task=lipophilicity", "split=ood", "uq=ensemble", "trainer=gpu")
TRAIN = Path(__file__).resolve().parents[1] / "train.py"


@contextlib.contextmanager
def pure_python_yaml() -> Iterator[None]:
    chosen = omegaconf._utils.get_yaml_loader
    omegaconf._utils.get_yaml_loader = lambda: OMEGACONF_PURE_PYTHON_LOADER
    try:
        yield
    finally:
        omegaconf._utils.get_yaml_loader = chosen


@contextlib.contextmanager
def hydra_reads_the_mode() -> Iterator[None]:
    handed = oodmol.apps.hydra_app._mode_read_from
    oodmol.apps.hydra_app._mode_read_from = lambda single_run: contextlib.nullcontext()
    try:
        yield
    finally:
        oodmol.apps.hydra_app._mode_read_from = handed


def compositions() -> None:
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        for override in OVERRIDES * 3:
            compose("train", [override], return_hydra_config=True)


def tiny_run(folder: Path) -> Callable[[], None]:
    csv = folder / "tiny.csv"
    csv.write_text("smiles,y\n" + "\n".join(f"{'C' * (i % 9 + 1)}O,{i}" for i in range(60)))
    runs = iter(range(10**6))

    def run() -> None:
        sys.argv = [str(TRAIN), "model=mlp", "model.max_epochs=1", "task=csv"]
        sys.argv += [f"task.path={csv}", "task.target_column=y", "task.ood_size=20"]
        sys.argv += ["threads=1", "progress=false", f"hydra.run.dir={folder / str(next(runs))}"]
        quiet = io.StringIO()
        with (
            contextlib.redirect_stdout(quiet),
            contextlib.redirect_stderr(quiet),
            contextlib.suppress(SystemExit),
        ):
            runpy.run_path(str(TRAIN), run_name="__main__")

    return run


def timed(work: Callable[[], None], within: Callable[[], contextlib.AbstractContextManager]):
    with within():
        start = time.perf_counter()
        work()
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        run = tiny_run(Path(folder))
        rows = {
            "composition, pure Python YAML": (compositions, pure_python_yaml, 24),
            "composition, libyaml": (compositions, contextlib.nullcontext, 24),
            "tiny run, Hydra composes to read the mode": (run, hydra_reads_the_mode, 1),
            "tiny run, Hydra handed the mode": (run, contextlib.nullcontext, 1),
        }
        for work, within, _ in rows.values():
            timed(work, within)  # first calls pay for caches and lazy imports
        seconds: dict[str, list[float]] = {name: [] for name in rows}
        for _ in range(args.repeats):
            for name, (work, within, count) in rows.items():
                seconds[name].append(timed(work, within) / count)
    print("| what | s each, median | max |")
    print("|---|---|---|")
    medians = {name: statistics.median(s) for name, s in seconds.items()}
    for name, s in seconds.items():
        print(f"| {name} | {medians[name]:.3f} | {max(s):.3f} |")
    names = list(rows)
    print(f"composition, pure Python / libyaml: {medians[names[0]] / medians[names[1]]:.2f}x")
    print(f"tiny run, composed again / handed: {medians[names[2]] / medians[names[3]]:.2f}x")


if __name__ == "__main__":
    main()
