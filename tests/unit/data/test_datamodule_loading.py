"""A run loads its data from several hooks (train.py's prepare_data and setup, then
Lightning's fit and test): the work and the data summary happen once per process."""

from __future__ import annotations

from pathlib import Path

from cache_helpers import ROWS
from lightning_utilities.core.rank_zero import rank_zero_only

import oodmol.data.datamodule as datamodule_module
from oodmol.data.datamodule import MoleculeDataModule
from oodmol.data.dataset import load_dataset
from oodmol.data.features import VectorFeatures
from oodmol.data.featurize.fingerprints import MorganFingerprint
from oodmol.data.splits.splitters import RandomSplitter
from oodmol.data.task import csv_task


def datamodule(csv: Path, data_dir: Path) -> MoleculeDataModule:
    return MoleculeDataModule(
        csv_task(str(csv), "y"),
        RandomSplitter(ood_size=0.2, seed=0),
        MorganFingerprint(n_bits=64),
        VectorFeatures(),
        data_dir=str(data_dir),
        progress=False,
    )


def test_summary_lines_once_per_process(make_csv, data_dir: Path, capsys, monkeypatch) -> None:
    """The data set's line and the task's (one molecule has no target) are printed once,
    and the data loaded once, however often the hooks run, by however many modules."""
    csv = make_csv("chains.csv", "smiles,y", [*ROWS, "CCCCCCCCCCCCO,"])
    loads = []
    load_task = datamodule_module.load_task
    monkeypatch.setattr(
        datamodule_module, "load_task", lambda *args: loads.append(1) or load_task(*args)
    )
    dm = datamodule(csv, data_dir)
    dm.prepare_data()
    dm.setup("fit")
    dm.prepare_data()
    dm.setup("test")
    lines = capsys.readouterr().out.splitlines()
    assert len(loads) == 1
    assert len(lines) == 2, lines
    assert "read 21, kept 21" in lines[0]
    assert "kept 20" in lines[1] and "non-finite y" in lines[1]

    again = datamodule(csv, data_dir)
    again.prepare_data()
    again.setup("fit")
    assert capsys.readouterr().out == ""
    assert len(again.datasets["train"]) == len(dm.datasets["train"])


def test_no_summary_line_on_other_ranks(make_csv, data_dir: Path, capsys, monkeypatch) -> None:
    """Under DDP only global rank 0 prints (Lightning sets the rank it reads)."""
    monkeypatch.setattr(rank_zero_only, "rank", 1)
    load_dataset(csv_task(str(make_csv("c.csv", "smiles,y", ROWS)), "y").source, data_dir)
    assert capsys.readouterr().out == ""
