"""Predict new molecules with a trained model:
oodmol predict ckpt_path=<file.ckpt> input=<file.csv> out=<predictions.csv>"""

from __future__ import annotations

import sys

from omegaconf import DictConfig

from oodmol.apps.hydra_app import hydra_app

MAX_NAMED = 50  # rows named one by one on the terminal; the output file has them all


@hydra_app("oodmol predict", "predict")
def main(cfg: DictConfig) -> None:
    # imported here: a command line with a typo is refused before these seconds of imports
    from oodmol.inference.predict import predict_file
    from oodmol.parallel import limit_threads

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
