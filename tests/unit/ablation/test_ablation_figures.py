"""Known answers for the ablation figures' numbers, from synthetic run folders."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from run_folders import PNG_MAGIC, run_folder

from oodmol.ablation.runs import complete_runs
from oodmol.ablation.transfer import data_correlation, transfer_table
from oodmol.cli.ablation import augmentation


def _augmentation_runs(root: Path) -> None:
    # N=0: seeds 2 and 4 (mean 3); N=100: 1.5 and 1.5; N=500: 3.3 (one seed)
    for n, seed, rmse in [(0, 0, 2.0), (0, 1, 4.0), (100, 0, 1.5), (100, 1, 1.5), (500, 0, 3.3)]:
        run_folder(
            root / f"mlp-{n}-{seed}",
            {
                "task": "t",
                "model": "mlp",
                "split": "ood_augmented",
                "seed": seed,
                "ood": {"rmse": rmse, "n": 50},
            },
            f"split:\n  name: ood_augmented\n  n_augment: {n}\n",
        )
    run_folder(
        root / "plain", {"task": "t", "model": "mlp", "split": "ood", "ood": {"rmse": 9.0, "n": 9}}
    )
    run_folder(root / "failed", {"task": "t", "status": "failed"})


def test_augmentation_figure_normalises_by_the_n0_mean(tmp_path: Path, capsys) -> None:
    _augmentation_runs(tmp_path / "runs")
    assert augmentation([str(tmp_path / "runs"), "--out", str(tmp_path / "out")]) == 0
    table = pd.read_csv(tmp_path / "out" / "augmentation.csv")
    assert table["n_augment"].tolist() == [0, 100, 500]
    assert table["seeds"].tolist() == [2, 2, 1]
    np.testing.assert_allclose(table["ood_rmse_mean"], [3.0, 1.5, 3.3])
    np.testing.assert_allclose(table["normalised_ood_rmse"], [1.0, 0.5, 1.1])
    np.testing.assert_allclose(table["ood_rmse_sd"][:2], [np.sqrt(2.0), 0.0])
    assert (tmp_path / "out" / "augmentation.png").read_bytes()[:8] == PNG_MAGIC
    assert (tmp_path / "out" / "augmentation.svg").read_text().lstrip().startswith("<?xml")
    assert "failed" in capsys.readouterr().err  # the failed run is named, not used


def test_augmentation_without_n0_or_with_two_holdouts_is_an_error(tmp_path: Path, capsys) -> None:
    cfg = "split:\n  n_augment: {}\n"
    base = {"task": "t", "model": "mlp", "split": "ood_augmented", "seed": 0}
    run_folder(tmp_path / "a" / "1", {**base, "ood": {"rmse": 1.0, "n": 5}}, cfg.format(100))
    assert augmentation([str(tmp_path / "a"), "--out", str(tmp_path / "o")]) == 2
    assert "no run with n_augment=0" in capsys.readouterr().err
    run_folder(tmp_path / "a" / "0", {**base, "ood": {"rmse": 1.0, "n": 6}}, cfg.format(0))
    assert augmentation([str(tmp_path / "a"), "--out", str(tmp_path / "o")]) == 2
    assert "hold-outs of sizes [5, 6]" in capsys.readouterr().err


def _transfer_runs(root: Path) -> None:
    configs = {name: {"name": name} for name in ("p", "q", "r")}

    def tuned(source: str, target: str, seed: int, rmse: float) -> dict:
        transfer = {
            "init_from": {"task": source, "task_config": configs[source], "loaded": 8},
            "task_config": configs[target],
            "frozen_values": 100,
        }
        return {"task": target, "model": "chemprop", "split": "ood", "seed": seed,
                "ood": {"rmse": rmse, "n": 10}, "transfer": transfer}  # fmt: skip

    def plain(task: str, split: str, seed: int, rmse: float) -> dict:
        return {"task": task, "model": "chemprop", "split": split, "seed": seed,
                "ood": {"rmse": rmse, "n": 10}}  # fmt: skip

    run_folder(root / "scratch-q-0", plain("q", "ood", 0, 2.0))  # un-pretrained q: mean 3
    run_folder(root / "scratch-q-1", plain("q", "ood", 1, 4.0))
    run_folder(root / "scratch-p", plain("p", "ood", 0, 5.0))
    run_folder(root / "pretrain", plain("p", "ood_of_q", 0, 99.0))  # a pretraining: not used
    run_folder(root / "p-q-0", tuned("p", "q", 0, 1.0))
    run_folder(root / "p-q-1", tuned("p", "q", 1, 2.0))  # mean 1.5: 0.5 of scratch
    run_folder(root / "r-q-0", tuned("r", "q", 0, 6.0))  # 2.0
    run_folder(root / "q-p-0", tuned("q", "p", 0, 4.0))  # 0.8


def test_transfer_table_pairs_finetuned_with_unpretrained_runs(tmp_path: Path) -> None:
    _transfer_runs(tmp_path)
    runs, _ = complete_runs(tmp_path)
    known_r = {("p", "q"): 0.9, ("r", "q"): -0.2, ("q", "p"): 0.9}
    table = transfer_table(runs, lambda a, b: known_r[(a["name"], b["name"])])
    table = table.set_index(["source", "target"]).sort_index()
    assert table.index.tolist() == [("p", "q"), ("q", "p"), ("r", "q")]
    np.testing.assert_allclose(table["normalised_ood_rmse"], [0.5, 0.8, 2.0])
    np.testing.assert_allclose(table["pearson_r"], [0.9, 0.9, -0.2])
    assert table["seeds_finetuned"].tolist() == [2, 1, 1]
    assert table["seeds_scratch"].tolist() == [2, 1, 2]


def test_transfer_without_an_unpretrained_baseline_is_an_error(tmp_path: Path) -> None:
    _transfer_runs(tmp_path)
    for folder in tmp_path.glob("scratch-q-*"):
        (folder / "metrics.json").unlink()
    runs, _ = complete_runs(tmp_path)
    with pytest.raises(ValueError, match=r"p -> q .*no un-pretrained run"):
        transfer_table(runs, lambda a, b: 0.0)


def test_correlation_of_two_properties_from_the_data(tmp_path: Path, data_dir: Path) -> None:
    """Pearson r over the molecules both tasks have: y2 = 1 - 2y gives -1 exactly, and
    a column built to have correlation 0.6 with y gives 0.6."""
    from e2e_helpers import tiny_molecules

    frame = tiny_molecules()
    y = frame["y"].to_numpy()
    z = (y - y.mean()) / y.std()
    rng = np.random.default_rng(0)
    e = rng.normal(size=len(z))
    e = e - e.mean() - z * (e @ z) / (z @ z)  # orthogonal to z, zero mean
    e = e / e.std()
    frame["y2"] = 1 - 2 * y
    frame["y3"] = 0.6 * z + 0.8 * e
    csv = tmp_path / "three.csv"
    frame.to_csv(csv, index=False)

    def task(column: str) -> dict:
        return {"_target_": "oodmol.data.task.csv_task", "path": str(csv),
                "target_column": column, "name": f"t-{column}"}  # fmt: skip

    r = data_correlation(data_dir)
    assert r(task("y2"), task("y")) == pytest.approx(-1.0, abs=1e-12)
    assert r(task("y"), task("y3")) == pytest.approx(0.6, abs=1e-9)
