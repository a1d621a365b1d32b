"""Train and test one model on one task: oodmol train model=<m> task=<t> split=<s> ..."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from oodmol.config import config_dir
from oodmol.interrupts import exit_when_interrupted
from oodmol.parallel import limit_threads
from oodmol.training.run import train
from oodmol.uq.members import run_members


@hydra.main(config_path=str(config_dir()), config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> dict | float | None:
    """One model, or the members of an ensemble (`uq.members`) and their combination."""
    with exit_when_interrupted():
        if cfg.threads:
            limit_threads(cfg.threads)
        return run_members(cfg, train)


if __name__ == "__main__":
    main()
