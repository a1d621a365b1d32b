"""Ensemble and bootstrap members of one run: their configs and folders, and training
them one after another with train.py's own function, side by side as processes of their
own (`uq.parallel`, oodmol.training.side_by_side), or one of them (a multirun's job)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig

from oodmol.identity import MEMBERS_DIR
from oodmol.overrides import OverrideError
from oodmol.training.ensembles import combine_members
from oodmol.training.side_by_side import can_run_side_by_side, train_side_by_side
from oodmol.uq.calibrators import CALIBRATORS
from oodmol.uq.estimators import estimator_from_config
from oodmol.uq.evaluators import EVALUATORS
from oodmol.uq.seeds import member_seed


def member_config(cfg: DictConfig, member: int, output_dir: str | Path) -> DictConfig:
    """A copy of the run's config for member `member`, writing into `output_dir`."""
    member_cfg = copy.deepcopy(cfg)
    member_cfg.paths.output_dir = str(output_dir)
    member_cfg.seed = member_seed(cfg.seed, member)
    member_cfg.uq.member = member
    return member_cfg


def single_model_config(cfg: DictConfig) -> DictConfig | None:
    """The config of the one model a run trains: the run's own for a plain run, member
    `uq.member`'s for one member alone; None where the run trains an estimator's members
    (`run_members`). The uncertainty settings' names are checked here, so that a typo is
    refused before training, not at test time after it."""
    uq = cfg.get("uq")
    if uq is None:
        return cfg
    members = estimator_from_config(uq).members
    CALIBRATORS.select(uq.get("calibrators"))
    EVALUATORS.select(uq.get("evaluators"))
    if uq.member is not None:
        return member_config(cfg, uq.member, cfg.paths.output_dir)
    return cfg if members <= 1 else None


def run_members(
    cfg: DictConfig, train: Callable[[DictConfig], dict | float | None]
) -> dict | float | None:
    """Run `train` once for a plain run, for member `uq.member` alone, or for each of the
    estimator's members (`uq.members`; `uq.parallel` of them at once) followed by their
    combination into the run's folder."""
    single = single_model_config(cfg)
    if single is not None:
        return train(single)
    members = estimator_from_config(cfg.uq).members
    calibrators = CALIBRATORS.select(cfg.uq.get("calibrators"))
    evaluators = EVALUATORS.select(cfg.uq.get("evaluators"))
    if cfg.ckpt_path is not None:
        raise OverrideError(
            "ckpt_path resumes one model; resume a member with uq.member=<k> ckpt_path=..."
        )
    run_dir = Path(cfg.paths.output_dir)
    member_dirs = [run_dir / MEMBERS_DIR / str(k) for k in range(members)]
    parallel = cfg.uq.get("parallel", 1)
    if parallel > 1 and can_run_side_by_side():
        train_side_by_side(cfg, member_dirs, parallel)
    else:
        if parallel > 1:
            print(f"[oodmol] uq.parallel={parallel} needs train.py's command line: in turn")
        for k, member_dir in enumerate(member_dirs):
            train(member_config(cfg, k, member_dir))
    if not cfg.test:
        return None
    metrics = combine_members(member_dirs, run_dir, calibrators, evaluators)
    print(f"[oodmol] {members} members combined in {run_dir}")
    return metrics
