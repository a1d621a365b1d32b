"""experiment=geometry end to end on the tiny CSV task: SchNet (a few channels) on
MMFF94 and on GFN2-xTB geometries, both leaving out the molecules that either geometry
fails, then `oodmol ablation geometry` over the two runs and the geometry report."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from e2e_helpers import QUIET, TinyTask

pytestmark = pytest.mark.slow

SCHNET = ["hidden_channels=8", "num_filters=8", "num_interactions=1"]


def test_both_geometries_train_on_the_same_molecules_and_are_compared(tmp_path) -> None:
    task = TinyTask.create(tmp_path)
    try:
        data = ["-m", "oodmol.cli", "data", "geometry", *task.task_args(), *QUIET]
        report = task.run([*data, "conformers=xtb"], timeout=1200)
        report.ok()
        assert "xtb geometries of" in report.stdout
        assert "CPU-s per molecule on average" in report.stdout  # the optimiser's cost
        runs = {}
        for geometry in ("mmff", "xtb"):
            out = task.root / "runs" / geometry
            task.run(
                [
                    "train.py",
                    "model=schnet",
                    *[f"model.module.backbone.{o}" for o in SCHNET],
                    "model.max_epochs=1",
                    f"conformers={geometry}",
                    "geometry_filter=[mmff,xtb]",
                    *task.task_args(),
                    *QUIET,
                    f"hydra.run.dir={out}",
                ],
                timeout=1200,
            ).ok()
            runs[geometry] = json.loads((out / "metrics.json").read_text())
        mmff, xtb = runs["mmff"]["data"], runs["xtb"]["data"]
        assert mmff["sizes_used"] == xtb["sizes_used"]  # the same molecules
        assert set(mmff["geometry_filter"]["geometries"]) == {"mmff", "xtb"}
        assert len(list((task.data_dir / "features").glob("*-graph3d-*.lmdb"))) == 2
        assert not list((task.data_dir / "features").glob("*.journal"))
        changes = next((task.data_dir / "geometry").glob("*-xtb.csv"))
        assert changes.with_suffix(".png").is_file() and changes.with_suffix(".svg").is_file()
        figure = task.root / "figure"
        ablation = [
            "-m",
            "oodmol.cli",
            "ablation",
            "geometry",
            str(task.root / "runs"),
            "--out",
            str(figure),
            "--changes",
            str(changes),
        ]
        task.run(ablation).ok()
        table = pd.read_csv(figure / "geometry.csv")
        assert sorted(table["geometry"]) == ["mmff", "xtb"]
        molecules = pd.read_csv(figure / "geometry-molecules.csv")
        assert molecules["rmsd_heavy"].notna().all() and len(molecules) > 0
    finally:
        task.close()
