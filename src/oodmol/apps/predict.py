"""Predict new molecules with a trained model:
oodmol predict ckpt_path=<file.ckpt> input=<file.csv> out=<predictions.csv>"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from oodmol.config import config_dir
from oodmol.interrupts import exit_when_interrupted
from oodmol.parallel import limit_threads
from oodmol.prediction import predict_file

MAX_NAMED = 50  # rows named one by one on the terminal; the output file has them all


@hydra.main(config_path=str(config_dir()), config_name="predict", version_base="1.3")
def main(cfg: DictConfig) -> None:
    with exit_when_interrupted():
        predict(cfg)


def predict(cfg: DictConfig) -> None:
    if cfg.threads:
        limit_threads(cfg.threads)
    done = predict_file(cfg)
    for line, reason in sorted(done.rejected.items())[:MAX_NAMED]:
        print(f"[oodmol] {cfg.input} line {line}: not predicted ({reason})", file=sys.stderr)
    if len(done.rejected) > MAX_NAMED:
        print(f"[oodmol] ... and {len(done.rejected) - MAX_NAMED} more", file=sys.stderr)
    summary = f"[oodmol] predicted {done.predicted} of {done.rows} molecules into {done.out}"
    if done.rejected:
        summary += f"; {len(done.rejected)} not predicted (the reason is in its 'error' column)"
    print(summary)


if __name__ == "__main__":
    main()
