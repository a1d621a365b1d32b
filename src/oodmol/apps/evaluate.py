"""Score a checkpoint, or an external predictions CSV, on a task's ID and OOD test sets:

oodmol evaluate ckpt_path=runs/.../checkpoints/best.ckpt
oodmol evaluate task=csd10k_density split=ood predictions=answers.csv model_name=llm
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from oodmol.config import config_dir
from oodmol.interrupts import exit_when_interrupted
from oodmol.parallel import limit_threads
from oodmol.scoring import score_checkpoint, score_file

log = logging.getLogger("oodmol.evaluate")


@hydra.main(config_path=str(config_dir()), config_name="evaluate", version_base="1.3")
def main(cfg: DictConfig) -> dict:
    with exit_when_interrupted():
        return evaluate(cfg)


def evaluate(cfg: DictConfig) -> dict:
    if cfg.threads:
        limit_threads(cfg.threads)
    if (cfg.ckpt_path is None) == (cfg.predictions is None):
        raise ValueError("give exactly one of ckpt_path=<file.ckpt> or predictions=<file.csv>")
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    metrics = score_checkpoint(cfg, out_dir) if cfg.ckpt_path else score_file(cfg, out_dir)
    log.info("metrics:\n%s", json.dumps({s: metrics[s] for s in ("id", "ood")}, indent=2))
    print(f"[oodmol] results in {out_dir}")
    return metrics


if __name__ == "__main__":
    main()
