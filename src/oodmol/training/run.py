"""Train and test one model into its run folder: hold the folder, decide what it allows
(train, resume, done), fit with the callbacks that make the run trustworthy, test, and
record how it ended: complete, failed (with the reason), or stopped by a signal.

A full disk (or quota) ends a run as a failure that can go on: its checkpoints are
written atomically (`AtomicCheckpointIO`), so the last good one survives the failed
write, metrics.json records the failure as resumable, and `resume=true` continues once
there is space again.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shlex
import signal
import sys
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.strategies.launchers import _SubprocessScriptLauncher
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig, OmegaConf

from oodmol.allocator import keep_freed_memory
from oodmol.comparability import SHORTENED, budget_overrides
from oodmol.data.datamodule import MoleculeDataModule
from oodmol.data.features import FeatureSet
from oodmol.errors import RunFailure
from oodmol.identity import config_key, run_identity
from oodmol.io import is_disk_full
from oodmol.locks import FolderLock
from oodmol.metrics.regression import NonFinitePredictions
from oodmol.overrides import OverrideError
from oodmol.parallel import global_rank
from oodmol.provenance import package_versions
from oodmol.run_record import RunRecord
from oodmol.training.build import (
    SaveRunConfig,
    apply_matmul_precision,
    build_datamodule,
    build_model,
    training_statistics,
)
from oodmol.training.checkpoint_io import run_plugins
from oodmol.training.device import device_facts
from oodmol.training.divergence import DivergenceGuard, TrainingDiverged
from oodmol.training.history import TrainingRecord, validation_summary
from oodmol.training.loggers import Resumable
from oodmol.training.memory import TrainingBatches, halving_on_oom, plan_memory
from oodmol.training.preemption import PreemptionCheckpoint
from oodmol.training.random_state import RandomState
from oodmol.training.run_folder import (
    CHECKPOINT_DIR,
    LAST_CHECKPOINT,
    LOCK_FILE,
    RunFolderError,
    last_checkpoint,
    plan_run,
    read_run_entry,
)
from oodmol.training.scoring_callback import TestEvaluation
from oodmol.training.transfer import apply_transfer

log = logging.getLogger("oodmol.train")


def train(cfg: DictConfig) -> dict | float | None:
    """Fit and test one model into cfg.paths.output_dir; returns its test metrics, or
    with `optimized_metric` the value of that validation metric at the selected epoch.

    The folder is held (its lock) before it is read and until the run ends, so that a
    second process started on it is refused instead of mixing two runs in one folder."""
    folder = Path(cfg.paths.output_dir)
    with _hold(folder):
        try:
            return _train(cfg, folder)
        except OSError as error:  # one that fit_and_test did not see (the data caches)
            if not is_disk_full(error):
                raise
            hint = _resume_hint(_command_line()[0], folder)
            raise RunFailure(
                _disk_full_line(_disk_full_reason(error, folder), None, hint)
            ) from None


def _hold(folder: Path) -> AbstractContextManager:
    """The lock of the run folder, taken now, or the refusal. Under DDP only rank 0 takes
    it: the other ranks are processes it started, training into the same folder."""
    if global_rank() != 0:
        return nullcontext()
    return FolderLock(folder, LOCK_FILE)  # FolderInUse, a user error, when another holds it


def _train(cfg: DictConfig, folder: Path) -> dict | float | None:
    run = RunCallbacks(cfg, folder)  # before anything fills in the config (model widths)
    plan = plan_run(folder, cfg)
    if plan.action == "done":
        print(plan.message, flush=True)
        objective = plan.metrics.get("objective")
        return objective["value"] if objective else plan.metrics
    L.seed_everything(cfg.seed, workers=True)
    apply_matmul_precision(cfg)
    if cfg.get("keep_freed_memory"):
        keep_freed_memory()
    dm = build_datamodule(cfg)
    dm.prepare_data()
    dm.setup("fit")
    statistics = training_statistics(cfg, dm)
    model = build_model(cfg, statistics)
    run.transfer = apply_transfer(
        model,
        cfg.model.get("init_from"),
        cfg.model.get("freeze"),
        cfg.model.get("parts"),
        OmegaConf.to_container(cfg.task, resolve=True),
    )
    run.memory = fit_to_memory(cfg, model, dm)
    loggers = instantiate_group(cfg.logger)
    for logger in loggers:
        if isinstance(logger, Resumable):
            logger.resume_at(plan.resume_step)
    callbacks = [
        *instantiate_group(cfg.callbacks),
        *instantiate_group(cfg.model.get("callbacks")),  # the model's own (e.g. EMA)
        *run.callbacks(statistics, dm.features, dm.feature_facts.get("baseline")),
    ]
    trainer = build_trainer(cfg, callbacks, loggers)
    try:
        return run.fit_and_test(trainer, model, dm, plan.checkpoint)
    finally:  # a multirun's next job (same process) must get a W&B run of its own
        for logger in loggers:
            if isinstance(logger, WandbLogger):
                logger.experiment.finish()


def fit_to_memory(cfg: DictConfig, model: L.LightningModule, dm: MoleculeDataModule) -> dict | None:
    """The run's evaluation batch, fitted to its memory (`oodmol.training.memory`), or
    the refusal of training batches that do not fit; what was measured, for the
    record."""
    trainer = cfg.trainer
    device = torch.device("cuda" if trainer.accelerator in ("gpu", "cuda") else "cpu")
    processes = 1 if device.type == "cuda" else int(trainer.get("devices") or 1)
    epochs = trainer.get("max_epochs") or -1
    if epochs < 0:  # bounded by steps or time: as many epochs as the planner sizes
        epochs = sys.maxsize
    training = TrainingBatches(
        dm.datasets["train"],
        dm.batch_size,
        lambda batch_size: dm.training_orders(batch_size, epochs, processes),
    )
    sets = dict.fromkeys([*dm.validation_sets(), *dm.predicted_sets()])
    evaluated = [dm.datasets[name] for name in sets]
    plan = plan_memory(
        model,
        dm.features.collate,
        device,
        evaluated,
        eval_batch_size=dm.eval_batch_size,
        fraction=cfg.get("memory_fraction") or 1.0,
        limit_mb=cfg.get("memory_limit_mb"),
        processes=processes,
        training=training if cfg.train else None,
    )
    model.cpu()  # Lightning places it
    if plan is None:
        return None
    if plan.train_need_mb is not None:
        log.info(
            "memory: the largest training step needs about %.0f MB, of %.0f MB this run has",
            plan.train_need_mb,
            plan.budget_mb,
        )
    if plan.eval_batch < dm.eval_batch_size:
        log.info(
            "evaluating in batches of %d molecules (%d asked): what fits %.0f MB",
            plan.eval_batch,
            dm.eval_batch_size,
            plan.budget_mb,
        )
        dm.eval_batch_size = plan.eval_batch
    return plan.facts()


def build_trainer(cfg: DictConfig, callbacks: list, loggers: list) -> L.Trainer:
    """The run's Trainer, as configured (`trainer`), writing every checkpoint atomically
    whatever its strategy (`run_plugins`)."""
    plugins = run_plugins(instantiate(cfg.trainer.get("plugins")))
    return instantiate(cfg.trainer, callbacks=callbacks, logger=loggers, plugins=plugins)


def instantiate_group(group: DictConfig | None) -> list:
    """Instantiate every non-null entry of a config group such as callbacks or logger."""
    return [instantiate(c) for c in (group or {}).values() if c is not None]


class RunCallbacks:
    """The callbacks every training run has, whatever its config, and the fit → test
    sequence that reads them."""

    def __init__(self, cfg: DictConfig, folder: Path) -> None:
        self.cfg = cfg
        self.folder = folder
        self.key = config_key(cfg)
        checkpoints = folder / CHECKPOINT_DIR
        self.last = ModelCheckpoint(
            dirpath=str(checkpoints),  # a Path in the checkpoint would not load weights-only
            filename=Path(LAST_CHECKPOINT).stem,
            monitor=None,
            save_top_k=1,
            every_n_epochs=1,
            enable_version_counter=False,
        )
        self.record = TrainingRecord()
        self.transfer: dict | None = None  # model.init_from / model.freeze, when used
        self.memory: dict | None = None  # what the model needs, and the batches chosen
        self.preemption = PreemptionCheckpoint(checkpoints / LAST_CHECKPOINT)
        self.overrides, self.debug = _command_line()
        self.run_entry = {
            "config_key": self.key,
            "identity": run_identity(cfg),
            "budget_overrides": budget_overrides(self.overrides),
            "debug": self.debug,
        }

    def callbacks(
        self, statistics: dict, features: FeatureSet, baseline: dict | None
    ) -> list[L.Callback]:
        return [
            SaveRunConfig(self.cfg, self.run_entry, statistics, features, baseline),
            self.record,
            RandomState(),
            DivergenceGuard(),
            self.preemption,
            self.last,
        ]

    def fit_and_test(
        self,
        trainer: L.Trainer,
        model: L.LightningModule,
        dm: MoleculeDataModule,
        checkpoint: Path | None,
    ) -> dict | float | None:
        cfg = self.cfg
        try:
            if cfg.train:
                trainer.fit(model, datamodule=dm, ckpt_path=checkpoint, weights_only=True)
            # a hyperparameter search's objective, read from validation alone; its trials
            # are tested only where asked (test_trials: the selection ablation)
            objective = self._objective(trainer) if cfg.optimized_metric else None
            if not cfg.test or (objective is not None and not cfg.test_trials):
                return None if objective is None else objective["value"]
            evaluation = next(c for c in trainer.callbacks if isinstance(c, TestEvaluation))
            evaluation.add_facts(
                self._facts(trainer) | ({"objective": objective} if objective else {})
            )
            selected = _best_checkpoint(trainer) or (self.last.last_model_path or None)

            def test(batch_size: int) -> None:
                dm.eval_batch_size = batch_size
                trainer.test(model, datamodule=dm, ckpt_path=selected, weights_only=True)

            halving_on_oom(test, dm.eval_batch_size)
        except SIGTERMException:
            raise self.preemption.stop(_resume_hint(self.overrides, self.folder)) from None
        except (TrainingDiverged, NonFinitePredictions) as error:
            failure = {"kind": type(error).__name__, "message": str(error)}
            unrecorded = "" if self._write_failure(trainer, failure) else _UNRECORDED
            raise RunFailure(f"run failed: {error}{unrecorded}") from None
        except OSError as error:
            if not is_disk_full(error):
                raise
            raise self._disk_full(trainer, error) from None
        if trainer.global_rank == 0 and evaluation.metrics:
            summary = {s: evaluation.metrics[s] for s in ("id", "ood")}
            log.info("test metrics:\n%s", json.dumps(summary, indent=2))
            print(f"[oodmol] results in {evaluation.output_dir}")
        return evaluation.metrics if objective is None else objective["value"]

    def _facts(self, trainer: L.Trainer) -> dict:
        """What metrics.json says about training: its record, budget and flags."""
        budget = self._budget(trainer)
        shortened = budget["overrides"] or budget["debug"] or budget["stopped_short"]
        return {
            "config_key": self.key,
            "identity": self.run_entry["identity"],
            "train_seconds": self.record.train_seconds,
            "training": {
                **self.record.summary(),
                **budget,
                "protocol": self.cfg.protocol.name,
                "device": device_facts(trainer),
                **self._tested(trainer),
            },
            "validation": validation_summary(
                self.record, trainer.datamodule, _checkpoint_callback(trainer) is not None
            ),
            "flags": [SHORTENED] if shortened else [],
            **({"transfer": self.transfer} if self.transfer else {}),
            **({"memory": self.memory} if self.memory else {}),
        }

    def _tested(self, trainer: L.Trainer) -> dict:
        """Which checkpoint the test scores, its epoch, and whether that epoch was also
        the best by validation loss or the last (both can hold)."""
        selecting = _checkpoint_callback(trainer)
        last_epoch = trainer.current_epoch - 1
        if selecting is None or not selecting.best_model_path:
            best = self.record.best_epoch("val_loss", "min")
            return {
                "tested": "last",
                "tested_epoch": last_epoch,
                "tested_is_best": best is not None and best["epoch"] == last_epoch,
            }
        best = self.record.best_epoch(selecting.monitor, selecting.mode)
        epoch = best["epoch"] if best else None
        return {"tested": "best", "tested_epoch": epoch, "tested_is_last": epoch == last_epoch}

    def _budget(self, trainer: L.Trainer) -> dict:
        early = any(isinstance(c, EarlyStopping) and c.stopped_epoch > 0 for c in trainer.callbacks)
        return {
            "max_epochs": trainer.max_epochs,
            "epochs_trained": trainer.current_epoch,
            "early_stopped": early,
            "stopped_short": trainer.current_epoch < trainer.max_epochs and not early,
            "limit_train_batches": trainer.limit_train_batches,
            "overrides": budget_overrides(self.overrides),
            "debug": self.debug,
        }

    def _objective(self, trainer: L.Trainer) -> dict:
        """`optimized_metric` at the epoch the checkpoint selected (name, value, epoch),
        recorded in a metrics.json (a search trial is complete without a test)."""
        name = self.cfg.optimized_metric
        checkpoint = _checkpoint_callback(trainer)
        monitor, mode = (checkpoint.monitor, checkpoint.mode) if checkpoint else (name, "min")
        best = self.record.best_epoch(monitor, mode)
        if best is None or name not in best:
            logged = sorted(
                {k for entry in self.record.validation for k in entry} - {"epoch", "step"}
            )
            raise OverrideError(
                f"optimized_metric={name} is not a logged validation metric; logged: "
                f"{sorted(logged)}"
            )
        objective = {"name": name, "value": best[name], "epoch": best["epoch"]}
        if trainer.global_rank == 0:
            self._record(trainer, "complete").with_sections(objective=objective).write(self.folder)
        return objective

    def _disk_full(self, trainer: L.Trainer, error: OSError) -> RunFailure:
        """A write refused for want of space. The failed file's temporary copy is already
        gone (`oodmol.io`), which gives its space back for metrics.json: the failure, as
        resumable. Under DDP the other ranks wait at the checkpoint's barrier for rank 0,
        which will not come: they are ended, as Lightning ends them on Ctrl-C."""
        reason = _disk_full_reason(error, self.folder)
        failure = {
            "kind": "disk_full",
            "resumable": True,
            "errno": errno.errorcode[error.errno],
            "path": error.filename,
            "message": reason,
        }
        recorded = self._write_failure(trainer, failure)
        launcher = trainer.strategy.launcher
        if isinstance(launcher, _SubprocessScriptLauncher):
            launcher.kill(signal.SIGKILL)
        hint = _resume_hint(self.overrides, self.folder)
        return RunFailure(_disk_full_line(reason, recorded, hint))

    def _write_failure(self, trainer: L.Trainer, failure: dict) -> bool:
        """Record the failure in metrics.json (rank 0); False where the disk had no room
        even for that."""
        if trainer.global_rank != 0:
            return True
        try:
            self._record(trainer, "failed").with_sections(failure=failure).write(self.folder)
        except OSError as error:
            if not is_disk_full(error):
                raise
            return False
        return True

    def _record(self, trainer: L.Trainer, status: str) -> RunRecord:
        """The record of a run that ends without a test: a search trial, a failure."""
        cfg = self.cfg
        return RunRecord.of(
            {
                "task": cfg.task.name,
                "split": cfg.split.name,
                "model": cfg.model.name,
                "seed": cfg.seed,
                "uq": {"method": cfg.uq.name, "member": cfg.uq.member},
                "status": status,
                **self._facts(trainer),
                "versions": package_versions(),
            }
        )


def _checkpoint_callback(trainer: L.Trainer) -> ModelCheckpoint | None:
    """The checkpoint that selects the tested model (the configured one, monitoring a
    metric), not the run's last.ckpt."""
    return next(
        (c for c in trainer.checkpoint_callbacks if isinstance(c, ModelCheckpoint) and c.monitor),
        None,
    )


def _best_checkpoint(trainer: L.Trainer) -> str | None:
    selecting = _checkpoint_callback(trainer)
    return (selecting.best_model_path or None) if selecting else None


_UNRECORDED = " (metrics.json could not record the failure: the disk is full)"


def _disk_full_reason(error: OSError, folder: Path) -> str:
    """What failed ("no space left on device (ENOSPC) writing <file>") and what the
    folder still holds to resume from."""
    what = f"{os.strerror(error.errno).lower()} ({errno.errorcode[error.errno]})"
    where = f" writing {error.filename}" if error.filename else ""
    last = last_checkpoint(folder)
    if not last.is_file():
        return f"{what}{where}; no checkpoint had been saved yet (resuming starts over)"
    try:
        saved = read_run_entry(last)
    except RunFolderError as unreadable:
        return f"{what}{where}; {unreadable}"
    return f"{what}{where}; {last} (epoch {saved['epoch']}, step {saved['global_step']}) is intact"


def _disk_full_line(reason: str, recorded: bool | None, hint: str) -> str:
    """The one line a run ended by a full disk prints. `recorded`: whether metrics.json
    holds the failure (None: the run ended before it had anything to record)."""
    unrecorded = _UNRECORDED if recorded is False else ""
    return f"run failed: {reason}{unrecorded}. Free some space, then resume: {hint}"


def _command_line() -> tuple[list[str], str | None]:
    """The run's command-line overrides and its debug config, when run by Hydra."""
    if not HydraConfig.initialized():
        return [], None
    hydra = HydraConfig.get()
    return list(hydra.overrides.task), hydra.runtime.choices.get("debug")


def _resume_hint(overrides: list[str], folder: Path) -> str:
    """The command that resumes this run: train.py with its overrides, its folder, and
    resume=true, quoted for a shell. The folder is named because a multirun's job (on
    SLURM run by submitit's own program) sits where train.py alone would not look."""
    kept = [o for o in overrides if not o.startswith(("resume=", "ckpt_path="))]
    program = sys.argv[0] if Path(sys.argv[0]).name == "train.py" else "train.py"
    return shlex.join(["python", program, *kept, f"hydra.run.dir={folder}", "resume=true"])
