"""Train and test one model on one task: oodmol train model=<m> task=<t> split=<s> ..."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from oodmol.apps.hydra_app import hydra_app


def answered_before_start(cfg: DictConfig) -> int | None:
    """A single run whose folder already holds it (done: exit 0), holds another run, or
    is held by a process training into it now (refused) is answered here, before Hydra
    writes its job record (`.hydra/`) into that folder, so the record there stays that
    of the run it holds. A DDP rank other than 0 is a process rank 0 started, training
    into the folder rank 0 holds: it is not asked."""
    from oodmol.parallel import global_rank

    if global_rank() != 0:
        return None
    uq = cfg.get("uq") or {}
    if uq.get("members", 1) > 1 and uq.get("member") is None:
        return None  # an ensemble's folder holds its members' runs
    try:
        folder = OmegaConf.select(cfg, "hydra.run.dir", throw_on_resolution_failure=True)
    except OmegaConfBaseException:
        return None
    from oodmol.locks import FolderInUse, holder_of
    from oodmol.training.run_folder import LOCK_FILE, plan_run
    from oodmol.uq.seeds import member_seed

    holder = holder_of(Path(folder), LOCK_FILE)
    if holder is not None:  # what the folder holds is that run's, unfinished: never judged
        raise FolderInUse.held_by(Path(folder), holder)
    if uq.get("member") is not None:  # a member trains, and is recorded, with its own seed
        cfg = cfg.copy()
        cfg.seed = member_seed(cfg.seed, uq.member)
    plan = plan_run(Path(folder), cfg)
    if plan.action != "done":
        return None
    print(plan.message, flush=True)
    return 0


@hydra_app("oodmol train", "train", before_start=answered_before_start)
def main(cfg: DictConfig) -> dict | float | None:
    """One model, or the members of an ensemble (`uq.members`) and their combination."""
    # imported here: a command line with a typo is refused before these seconds of imports
    from oodmol.parallel import limit_threads
    from oodmol.training.members import run_members, single_model_config
    from oodmol.training.run import train

    if cfg.threads:
        limit_threads(cfg.threads)
    single = single_model_config(cfg)
    if single is not None:  # one model: plan, data, model, fit, test, record
        return train(single)
    return run_members(cfg, train)  # an ensemble: train(...) for each member, then combined


if __name__ == "__main__":
    main()
