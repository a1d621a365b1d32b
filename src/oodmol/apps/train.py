"""Train and test one model on one task: oodmol train model=<m> task=<t> split=<s> ..."""

from __future__ import annotations

from omegaconf import DictConfig

from oodmol.apps.hydra_app import hydra_app


@hydra_app("oodmol train", "train")
def main(cfg: DictConfig) -> dict | float | None:
    """One model, or the members of an ensemble (`uq.members`) and their combination."""
    # imported here: a command line with a typo is refused before these seconds of imports
    from oodmol.parallel import limit_threads
    from oodmol.training.run import train
    from oodmol.uq.members import run_members

    if cfg.threads:
        limit_threads(cfg.threads)
    return run_members(cfg, train)


if __name__ == "__main__":
    main()
