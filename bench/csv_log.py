"""The run's CSV log (`oodmol.training.loggers.CSVLogger`) against Lightning's own, the
logging of one long run without the training.

    python -m bench.csv_log [--epochs 100] [--steps 1790] [--log-every 10] [--save-every 100]

The default is the QM9 MLP's run under BOOM's protocol (114,707 molecules in batches of
64: 1,790 steps an epoch, a row every 10 steps, a save every 100, a validation column
appearing in the first epoch). It prints the seconds each logger spent logging and
saving, and `ratio=<ours / Lightning's>`: the price of a log that a kill cannot tear
(Lightning's appends without flushing to disk).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from lightning.pytorch.loggers import CSVLogger as LightningCSVLogger

from oodmol.training.loggers import CSVLogger


def log_run(logger, args: argparse.Namespace) -> float:
    """Seconds spent logging and saving `args.epochs` epochs into `logger`."""
    start = time.perf_counter()
    step = 0
    for epoch in range(args.epochs):
        for _ in range(args.steps):
            if step % args.log_every == 0:
                logger.log_metrics({"epoch": epoch, "train_loss": 1.0 / (step + 1)}, step=step)
            if step % args.save_every == 0:
                logger.save()
            step += 1
        logger.log_metrics({"epoch": epoch, "val_loss": 0.5, "val_rmse": 0.7}, step=step)
        logger.save()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--steps", type=int, default=1790)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--save-every", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        ours = CSVLogger(Path(folder) / "ours", name="csv", version="")
        ours.resume_at(None)
        theirs = LightningCSVLogger(Path(folder) / "lightning", name="csv", version="")
        seconds_ours = log_run(ours, args)
        seconds_theirs = log_run(theirs, args)
        rows = len((Path(ours.log_dir) / "metrics.csv").read_text().splitlines()) - 1
    print(f"{args.epochs} epochs, {rows} rows: ours {seconds_ours:.2f} s, ", end="")
    print(f"Lightning's {seconds_theirs:.2f} s")
    print(f"ratio={seconds_ours / seconds_theirs:.2f}")


if __name__ == "__main__":
    main()
