"""The door of every Hydra application (train, evaluate, predict): the command line is
checked before the heavy imports (an unknown key or choice, a run folder that cannot be
written, a GPU the machine lacks: one line within a second), and inside the job a user
error or a failed run ends in its message and exit status, as `oodmol.errors` says. In a
multirun a failed job raises instead, so the other jobs still run and the sweep reports
it at its end."""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import hydra
from hydra._internal.hydra import Hydra
from hydra._internal.utils import get_args_parser
from hydra.core.hydra_config import HydraConfig
from hydra.errors import CompactHydraException
from hydra.types import RunMode
from omegaconf import DictConfig

from oodmol.apps.preflight import check_gpu, check_output_folder
from oodmol.config import config_dir
from oodmol.errors import user_errors, without_debug_flag
from oodmol.overrides import check_overrides, check_settings, deferred_to_jobs
from oodmol.parallel import global_rank

# flags under which Hydra prints something instead of running the job
_HYDRA_INFO_FLAGS = ("help", "hydra_help", "cfg", "info", "shell_completion")


class JobFailed(CompactHydraException):
    """A multirun job that ended with a user error or a failed run: Hydra records it and
    shows its message alone (no traceback) once the sweep's batch has run."""


def hydra_app(
    program: str,
    config_name: str,
    before_start: Callable[[DictConfig], int | None] | None = None,
) -> Callable[[Callable], Callable[[], Any]]:
    """`@hydra_app("oodmol train", "train")` over a function of the composed config makes
    the application's `main()`. `before_start`, given the checked config of a single run
    (not a sweep), may answer the command before Hydra starts the job: an exit status,
    or None to go on."""

    def wrap(task: Callable[[DictConfig], Any]) -> Callable[[], Any]:
        @functools.wraps(task)  # Hydra names the job after the task's module
        def job(cfg: DictConfig) -> Any:
            return run_job(program, task, cfg)

        hydra_main = hydra.main(
            config_path=str(config_dir()), config_name=config_name, version_base="1.3"
        )(job)

        def main() -> Any:
            sys.argv[1:] = without_debug_flag(sys.argv[1:])
            args, _ = get_args_parser().parse_known_args(sys.argv[1:])
            single_run: DictConfig | None = None  # its config, where the door composed one
            # Hydra prints instead of running, or reads another primary config folder
            if not any(getattr(args, f, None) for f in (*_HYDRA_INFO_FLAGS, "config_path")):
                overrides = list(args.overrides)
                if args.config_dir:  # --config-dir: one more folder Hydra searches
                    folder = Path(args.config_dir).resolve()
                    overrides.insert(0, f"hydra.searchpath=[file://{folder}]")
                with user_errors(program):
                    cfg = check_overrides(args.config_name or config_name, overrides)
                    check_output_folder(cfg, multirun=bool(args.multirun))
                    if not args.multirun:  # a sweep's jobs may run on other machines
                        check_gpu(cfg)
                    answer = None if args.multirun or not before_start else before_start(cfg)
                if answer is not None:
                    raise SystemExit(answer)
                if args.multirun:
                    deferred = deferred_to_jobs(args.overrides)
                    sys.argv[1:] = [deferred.get(arg, arg) for arg in sys.argv[1:]]
                else:
                    single_run = cfg
            with _mode_read_from(single_run):
                return hydra_main()

        return main

    return wrap


@contextlib.contextmanager
def _mode_read_from(single_run: DictConfig | None) -> Iterator[None]:
    """Hydra composes a command line's whole config once more only to read `hydra.mode`
    (`Hydra.get_mode`, a seventh of a second); where the door has composed a single run's
    config from the same overrides, Hydra is handed the mode read from it."""
    if single_run is None:
        yield
        return
    mode = single_run.hydra.mode
    asked = Hydra.get_mode
    Hydra.get_mode = lambda self, config_name, overrides: mode  # type: ignore[method-assign]
    try:
        yield
    finally:
        Hydra.get_mode = asked  # type: ignore[method-assign]


def run_job(program: str, task: Callable[[DictConfig], Any], cfg: DictConfig) -> Any:
    """One job: its settings checked, then the task; its user error or failure shown."""
    multirun = HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN
    with user_errors(program, raise_as=JobFailed if multirun else None, show=global_rank() == 0):
        check_settings(cfg)
        check_gpu(cfg)
        return task(cfg)
