"""Learning curves: nested training subsets with fixed test sets (split.subset), scalers
fitted on the subset alone, known answers for the fitted slope, and the experiment end to
end through the command lines."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from e2e_helpers import MLP, QUIET, TinyTask, tiny_molecules
from run_folders import PNG_MAGIC, run_folder

from oodmol.cli.ablation import learning_curve
from oodmol.data.datamodule import MoleculeDataModule
from oodmol.data.features import VectorFeatures
from oodmol.data.featurize.fingerprints import MorganFingerprint
from oodmol.data.splits.splitters import KDETailSplitter
from oodmol.data.table import MoleculeTable
from oodmol.data.task import csv_task

FRACTIONS = (0.1, 0.25, 0.5, 1.0)


def _table(n: int = 400) -> MoleculeTable:
    rng = np.random.default_rng(5)
    ids = rng.permutation(n).astype(np.int64) + 3
    return MoleculeTable("s", ids, np.array([f"C{i}" for i in ids]), {"y": rng.normal(size=n)})


@pytest.mark.parametrize("val", ["random", "tail"])
def test_subsets_are_nested_and_the_other_sets_never_change(val: str) -> None:
    table = _table()
    full = KDETailSplitter(ood_size=40, val=val).split(table, "y")
    for repeat in (0, 1):
        previous = np.array([], dtype=np.int64)
        for fraction in FRACTIONS:
            split = KDETailSplitter(ood_size=40, val=val, subset=[fraction, repeat]).split(
                table, "y"
            )
            for name in full.names():
                if name != "train":  # identical molecules for every fraction and repeat
                    np.testing.assert_array_equal(split.sets[name], full.sets[name])
            train = split.sets["train"]
            assert len(train) == round(fraction * len(full.sets["train"]))
            assert set(previous) <= set(train) <= set(full.sets["train"])
            assert split.info["subset"] == {"pool": len(full.sets["train"]), "kept": len(train)}
            previous = train
        np.testing.assert_array_equal(previous, full.sets["train"])
    small = [KDETailSplitter(ood_size=40, subset=[0.1, r]).split(table, "y") for r in (0, 1)]
    assert small[0].hash != small[1].hash  # each repeat its own subset, its own identity
    assert not np.array_equal(small[0].sets["train"], small[1].sets["train"])


@pytest.mark.parametrize("subset", [[0.0, 0], [1.5, 0], [0.5, -1], [0.5], "half", [0.5, 0.5]])
def test_bad_subset_is_refused(subset) -> None:
    with pytest.raises(ValueError, match=r"split.subset must be \[fraction, repeat\]"):
        KDETailSplitter(ood_size=40, subset=subset)


def test_scalers_are_fitted_on_the_subset_alone(tmp_path: Path) -> None:
    csv = tmp_path / "tiny.csv"
    tiny_molecules().to_csv(csv, index=False)
    dm = MoleculeDataModule(
        csv_task(str(csv), "y"),
        KDETailSplitter(ood_size=20, subset=[0.25, 0]),
        MorganFingerprint(n_bits=32),
        VectorFeatures(),
        data_dir=str(tmp_path / "data"),
        progress=False,
    )
    dm.prepare_data()
    dm.setup("fit")
    subset = dm.split.sets["train"]
    assert len(subset) == dm.split.info["subset"]["kept"] < dm.split.info["subset"]["pool"]
    np.testing.assert_array_equal(dm.set_ids["train"], subset)
    features = dm.store.matrix(subset).astype(np.float64)
    np.testing.assert_allclose(dm.features.mean, features.mean(axis=0))
    assert len(dm.train_targets) == len(subset)


def _curve_runs(root: Path) -> None:
    """RMSE = a·n^b exactly: ID a=2, b=-0.5; OOD a=3, b=-0.1 (two repeats at n=100)."""
    for fraction, repeat, n in [(0.1, 0, 100), (0.1, 1, 100), (0.4, 0, 400), (1.0, 0, 1000)]:
        run_folder(
            root / f"{fraction}-{repeat}",
            {
                "task": "t",
                "model": "mlp",
                "split": "ood",
                "split_hash": f"h{fraction}{repeat}",
                "data": {"sizes_used": {"train": n}},
                "id": {"rmse": 2.0 * n**-0.5, "n": 5},
                "ood": {"rmse": 3.0 * n**-0.1, "n": 7},
            },
            f"split:\n  name: ood\n  subset: [{fraction}, {repeat}]\n",
        )
    plain = {"task": "t", "model": "mlp", "ood": {"rmse": 1.0}, "id": {"rmse": 1}}
    run_folder(root / "plain", plain, "split:\n  name: ood\n  subset: null\n")


def test_fitted_slope_of_a_power_law_is_its_exponent(tmp_path: Path) -> None:
    _curve_runs(tmp_path / "runs")
    assert learning_curve([str(tmp_path / "runs"), "--out", str(tmp_path / "o")]) == 0
    table = pd.read_csv(tmp_path / "o" / "learning-curve.csv")
    id_rows, ood_rows = table[table["set"] == "ID"], table[table["set"] == "OOD"]
    np.testing.assert_allclose(id_rows["slope"], -0.5)
    np.testing.assert_allclose(ood_rows["slope"], -0.1)
    np.testing.assert_allclose(id_rows["prefactor"], 2.0)
    np.testing.assert_allclose(ood_rows["prefactor"], 3.0)
    assert id_rows["n_train"].tolist() == [100, 400, 1000]
    assert id_rows["repeats"].tolist() == [2, 1, 1]
    np.testing.assert_allclose(ood_rows["rmse_mean"], 3.0 * np.array([100, 400, 1000]) ** -0.1)
    assert (tmp_path / "o" / "learning-curve.png").read_bytes()[:8] == PNG_MAGIC
    assert "-0.50" in (tmp_path / "o" / "learning-curve.svg").read_text()


def test_one_training_size_has_no_slope(tmp_path: Path, capsys) -> None:
    run_folder(
        tmp_path / "r" / "a",
        {"task": "t", "model": "m", "data": {"sizes": {"train": 9}}, "id": {"rmse": 1.0},
         "ood": {"rmse": 2.0}},
        "split:\n  subset: [0.5, 0]\n",
    )  # fmt: skip
    assert learning_curve([str(tmp_path / "r"), "--out", str(tmp_path / "o")]) == 2
    assert "at least two training set sizes" in capsys.readouterr().err


@pytest.mark.slow
def test_learning_curve_experiment_end_to_end(tmp_path: Path) -> None:
    """Three subsets of the tiny task through experiment=learning_curve's sweep, then the
    figure: the test sets are the same molecules in every run."""
    task = TinyTask.create(tmp_path, workers=1)
    sweep = tmp_path / "sweep"
    try:
        task.run(
            ["train.py", "-m", "experiment=learning_curve",
             "split.subset=[0.25,0],[0.25,1],[1.0,0]", *task.task_args(), *MLP, *QUIET,
             f"hydra.sweep.dir={sweep}"]
        ).ok()  # fmt: skip
        task.run(
            ["-m", "oodmol.cli", "ablation", "learning-curve", str(sweep), "--out", str(tmp_path)]
        ).ok()
    finally:
        task.close()
    metrics = [json.loads(p.read_text()) for p in sorted(sweep.rglob("metrics.json"))]
    assert len(metrics) == 3 and len({m["split_hash"] for m in metrics}) == 3
    predictions = [pd.read_csv(p) for p in sorted(sweep.rglob("predictions.csv"))]
    for name in ("id", "ood", "val"):
        ids = [sorted(p.loc[p["set"] == name, "mol_id"]) for p in predictions]
        assert ids[0] == ids[1] == ids[2] and ids[0]
    table = pd.read_csv(tmp_path / "learning-curve.csv")
    assert sorted(table["repeats"].unique()) == [1, 2]
    assert np.isfinite(table["slope"]).all()
