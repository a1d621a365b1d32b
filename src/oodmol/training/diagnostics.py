"""Where in training the OOD error goes: a diagnostic, never a selection rule.

`OODTrajectory` scores the ID and OOD test sets after every training epoch and writes
them to `ood_trajectory.csv` (and `ood_trajectory.png` at the end of fitting). Nothing
reads them back: they are not logged to Lightning (so no checkpoint, early stopping or
scheduler can monitor them) and they do not enter metrics.json. Choosing a model or an
epoch by test error leaks the test set into the choice; the file says so in its header.
The model is evaluated in eval mode without drawing from the random generators, so a
run with the diagnostic trains exactly as one without it.

    python train.py ... callbacks=diagnostics
"""

from __future__ import annotations

from pathlib import Path

import lightning as L
import matplotlib
import numpy as np
import torch
from lightning.fabric.utilities.apply_func import move_data_to_device

from oodmol.data.datamodule import TEST_SETS
from oodmol.io import atomic_write_text
from oodmol.plotting import SET_COLORS

matplotlib.use("Agg")
import matplotlib.pyplot as plt

WARNING = "# diagnostic only: test-set errors per epoch; never use them to choose a model"


class OODTrajectory(L.Callback):
    """Writes `<output_dir>/ood_trajectory.csv` (epoch, id_rmse, ood_rmse)."""

    def __init__(self, output_dir: str) -> None:
        self.output_dir = Path(output_dir)
        self.rows: list[tuple[int, float, float]] = []

    def state_dict(self) -> dict:
        return {"rows": [list(row) for row in self.rows]}  # a resumed run keeps its history

    def load_state_dict(self, state_dict: dict) -> None:
        self.rows = [tuple(row) for row in state_dict.get("rows", [])]

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        loaders = trainer.datamodule.test_dataloader()  # id, ood, then val where held out
        errors = [_rmse(trainer, pl_module, loaders[i]) for i, _ in enumerate(TEST_SETS)]
        self.rows = [r for r in self.rows if r[0] < trainer.current_epoch]
        self.rows.append((trainer.current_epoch, *errors))
        if trainer.is_global_zero:
            lines = [WARNING, "epoch,id_rmse,ood_rmse"]
            lines += [f"{e},{i!r},{o!r}" for e, i, o in self.rows]
            atomic_write_text(self.output_dir / "ood_trajectory.csv", "\n".join(lines) + "\n")

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.is_global_zero or not self.rows:
            return
        epochs, id_rmse, ood_rmse = (np.array(column) for column in zip(*self.rows, strict=True))
        figure, axes = plt.subplots(figsize=(5, 3.5), layout="constrained")
        axes.plot(epochs, id_rmse, label="ID test", color=SET_COLORS["id"])
        axes.plot(epochs, ood_rmse, label="OOD test", color=SET_COLORS["ood"])
        axes.set(xlabel="epoch", ylabel="RMSE", title="Test error during training (diagnostic)")
        axes.legend()
        figure.text(0.01, 0.01, "never used to select a model", fontsize=7, color="grey")
        figure.savefig(self.output_dir / "ood_trajectory.png", dpi=120)
        plt.close(figure)


@torch.no_grad()
def _rmse(trainer: L.Trainer, model: L.LightningModule, loader) -> float:
    """RMSE of the model's deterministic prediction (as validated) on one loader, with
    the trainer's precision (float64 inputs, bf16 autocast) as in its own loops."""
    training = model.training
    model.eval()
    squared, count = 0.0, 0
    plugin = trainer.precision_plugin
    for batch in loader:
        batch = move_data_to_device(plugin.convert_input(batch), model.device)
        with plugin.forward_context():
            mean = model.predict_batch(batch).mean.double()
        squared += float(((mean - batch.y.double()) ** 2).sum())
        count += len(batch)
    model.train(training)
    return (squared / count) ** 0.5 if count else float("nan")
