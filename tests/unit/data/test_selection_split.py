"""split.val=tail: a pseudo-OOD validation set cut from the training pool's own KDE tails
(the OOD set's rule on the training molecules alone), with every other set unchanged;
and the run that selects on it while scoring both validation sets."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch
from e2e_helpers import tiny_molecules
from sklearn.neighbors import KernelDensity

from oodmol.data.datamodule import MoleculeDataModule
from oodmol.data.features import VectorFeatures
from oodmol.data.featurize.fingerprints import MorganFingerprint
from oodmol.data.splits.assignment import SplitAssignment
from oodmol.data.splits.splitters import KDETailSplitter, RandomSplitter
from oodmol.data.table import MoleculeTable
from oodmol.data.task import csv_task
from oodmol.models.base import Prediction, Regressor
from oodmol.training.history import TrainingRecord, validation_summary

N = 400


def _table() -> MoleculeTable:
    rng = np.random.default_rng(3)
    y = np.round(np.concatenate([rng.normal(0, 1, N - 40), 4 + rng.pareto(2.0, 40)]), 2)
    ids = rng.permutation(N).astype(np.int64) * 2 + 5  # rows not in id order
    return MoleculeTable("synthetic", ids, np.array([f"C{i}" for i in ids]), {"y": y})


@pytest.mark.parametrize("splitter", [KDETailSplitter, RandomSplitter])
def test_tail_validation_is_the_training_pools_lowest_kde_density(splitter) -> None:
    table = _table()
    plain = splitter(ood_size=40).split(table, "y")
    tail = splitter(ood_size=40, val="tail").split(table, "y")
    for name in ("id", "ood", "val"):  # the test sets and the ID validation set stay
        np.testing.assert_array_equal(tail.sets[name], plain.sets[name])
    pool = plain.sets["train"]
    y_pool = table.targets["y"][table.rows_of(pool)]
    kde = KernelDensity(kernel="gaussian", bandwidth="scott").fit(y_pool[:, None])
    lowest = pool[np.lexsort((pool, kde.score_samples(y_pool[:, None])))[: len(plain.sets["val"])]]
    np.testing.assert_array_equal(tail.sets["val_tail"], np.sort(lowest))
    np.testing.assert_array_equal(tail.sets["train"], np.setdiff1d(pool, tail.sets["val_tail"]))
    kept = table.targets["y"][table.rows_of(tail.sets["train"])]
    assert tail.info["val_tail"]["target_range_kept"] == [kept.min(), kept.max()]
    assert tail.hash != plain.hash


def test_default_validation_leaves_the_split_and_its_file_name_as_they_were() -> None:
    table = _table()
    explicit = KDETailSplitter(ood_size=40, val="random", subset=None)
    assert explicit.settings() == KDETailSplitter(ood_size=40).settings()
    assert "val" not in explicit.settings() and "subset" not in explicit.settings()
    split = explicit.split(table, "y")
    assert split.names() == ["train", "val", "id", "ood"]
    assert KDETailSplitter(ood_size=40, val="tail").settings()["val"] == "tail"


def test_split_file_keeps_the_tail_set(tmp_path: Path) -> None:
    split = RandomSplitter(ood_size=40, val="tail").split(_table(), "y")
    split.write(tmp_path / "s.json")
    again = SplitAssignment.read(tmp_path / "s.json")
    assert again.hash == split.hash and again.names() == split.names()
    assert again.sizes()["val_tail"] == again.sizes()["val"] > 0


def test_bad_validation_rule_is_refused() -> None:
    with pytest.raises(ValueError, match=r"split.val must be one of \('random', 'tail'\)"):
        KDETailSplitter(ood_size=40, val="ood")


class _Scheduled(Regressor):
    """Predicts the truth plus an error that depends on the epoch and on whether the
    value lies inside the training range: epoch 0 errs on typical values (the ID
    validation set's), epoch 1 on the extremes (the tail set's), epoch 2 on both."""

    ERRORS = ((2.0, 0.0), (0.0, 2.0), (1.0, 1.5))  # (inside, outside) per epoch

    def __init__(self, low: float, high: float) -> None:
        super().__init__()
        self.low, self.high = low, high
        self.weight = torch.nn.Parameter(torch.zeros(()))

    def predict_batch(self, batch) -> Prediction:
        inside, outside = self.ERRORS[self.current_epoch]
        y = batch.y.double()
        typical = (y >= self.low) & (y <= self.high)
        return Prediction(y + torch.where(typical, inside, outside) + 0 * self.weight)

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        return 0 * self.weight

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


def test_only_the_tail_set_selects_and_both_are_recorded(tmp_path: Path) -> None:
    """The ID validation set is best at epoch 1, the tail set at epoch 0: the checkpoint
    keeps epoch 0, `val_loss` is the tail set's loss, and both sets' bests are recorded."""
    csv = tmp_path / "tiny.csv"
    tiny_molecules().to_csv(csv, index=False)
    dm = MoleculeDataModule(
        csv_task(str(csv), "y"),
        KDETailSplitter(ood_size=20, val="tail"),
        MorganFingerprint(n_bits=32),
        VectorFeatures(),
        data_dir=str(tmp_path / "data"),
        progress=False,
    )
    dm.prepare_data()
    dm.setup("fit")
    assert dm.validation_sets() == ["val", "val_tail"]
    assert dm.validation_logs() == [["val_id"], ["val_tail", "val"]]
    low, high = dm.split.info["val_tail"]["target_range_kept"]
    checkpoint = L.pytorch.callbacks.ModelCheckpoint(
        dirpath=tmp_path / "ckpt", filename="best", monitor="val_loss", mode="min"
    )
    record = TrainingRecord()
    trainer = L.Trainer(
        max_epochs=3,
        callbacks=[checkpoint, record],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(_Scheduled(low, high), datamodule=dm)

    epochs = record.validation
    assert [e["epoch"] for e in epochs] == [0, 1, 2]
    for entry in epochs:
        assert entry["val_loss"] == entry["val_tail_loss"] != entry["val_id_loss"]
    id_losses = [e["val_id_loss"] for e in epochs]
    tail_losses = [e["val_tail_loss"] for e in epochs]
    assert int(np.argmin(id_losses)) == 1 and int(np.argmin(tail_losses)) == 0
    assert torch.load(checkpoint.best_model_path, weights_only=True)["epoch"] == 0
    assert float(checkpoint.best_model_score) == pytest.approx(tail_losses[0])

    summary = validation_summary(record, dm, selects=True)
    assert summary["selected_on"] == "val_tail"
    assert summary["sets"]["val"] == {
        "metric": "val_id_loss",
        "best_loss": id_losses[1],
        "best_epoch": 1,
        "tested_loss": id_losses[0],
    }
    assert summary["sets"]["val_tail"]["best_epoch"] == 0
    assert summary["sets"]["val_tail"]["tested_loss"] == tail_losses[0]
