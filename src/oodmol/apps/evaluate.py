"""Score a checkpoint, or an external predictions CSV, on a task's ID and OOD test sets:

oodmol evaluate ckpt_path=runs/.../checkpoints/best.ckpt
oodmol evaluate task=csd10k_density split=ood predictions=answers.csv model_name=llm
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from oodmol.apps.hydra_app import hydra_app
from oodmol.overrides import OverrideError

log = logging.getLogger("oodmol.evaluate")


@hydra_app("oodmol evaluate", "evaluate")
def main(cfg: DictConfig) -> dict:
    if (cfg.ckpt_path is None) == (cfg.predictions is None):
        raise OverrideError(
            "give exactly one of ckpt_path=<file.ckpt> (a trained model) or "
            "predictions=<file.csv> (predictions made elsewhere)"
        )
    # imported here: a command line with a typo is refused before these seconds of imports
    from oodmol.inference.rescore import score_checkpoint
    from oodmol.parallel import limit_threads
    from oodmol.scoring.external import score_file

    if cfg.threads:
        limit_threads(cfg.threads)
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    metrics = score_checkpoint(cfg, out_dir) if cfg.ckpt_path else score_file(cfg, out_dir)
    log.info("metrics:\n%s", json.dumps({s: metrics[s] for s in ("id", "ood")}, indent=2))
    print(f"[oodmol] results in {out_dir}")
    return metrics


if __name__ == "__main__":
    main()
