"""Combining ensemble members from their files (the path shared by sequential members
and multirun members), on hand-made member folders."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from oodmol.cli.uq import combine
from oodmol.training.ensembles import MemberError, combine_members, find_members
from oodmol.uq.seeds import member_seed

# two members, molecules: id 1 (y 1.0), ood 2 (y 5.0), val 3 and 4 (y 0.0, 2.0)
ROWS = [("id", 1, 1.0), ("ood", 2, 5.0), ("val", 3, 0.0), ("val", 4, 2.0)]
PREDICTIONS = {0: [1.0, 3.0, 0.5, 1.5], 1: [2.0, 4.0, -0.5, 2.5]}
ALEATORIC_STD = {0: [0.1, 0.2, 0.3, 0.4], 1: [0.3, 0.4, 0.5, 0.6]}


def write_member(root, k, run_seed=7, aleatoric=True, **header):
    folder = root / "members" / str(k)
    folder.mkdir(parents=True)
    frame = pd.DataFrame(
        {
            "mol_id": [r[1] for r in ROWS],
            "smiles": ["C", "CC", "CCC", "CCCC"],
            "set": [r[0] for r in ROWS],
            "y_true": [r[2] for r in ROWS],
            "y_pred": PREDICTIONS[k],
        }
    )
    if aleatoric:
        frame["y_std"] = frame["y_std_aleatoric"] = ALEATORIC_STD[k]
    frame.to_csv(folder / "predictions.csv", index=False)
    record = {
        "task": "t",
        "split": "ood",
        "model": "mlp",
        "split_hash": "h",
        "seed": member_seed(run_seed, k),
        "n_params": 10,
        "train_seconds": 1.5,
        "property": "density",
        "units": "g/cm³",
        "train_median": 1.0,
        "uq": {"method": "mve", "member": k},
        "id": {"rmse": 0.1, "r2": 0.5},
        "ood": {"rmse": 0.2, "binned_r2": 0.4},
        **header,
    }
    (folder / "metrics.json").write_text(json.dumps(record))
    return folder


def test_combination_matches_hand_values(tmp_path):
    dirs = [write_member(tmp_path, k) for k in (0, 1)]
    metrics = combine_members(dirs, tmp_path)
    out = pd.read_csv(tmp_path / "predictions.csv")
    # id molecule: means 1, 2 -> 1.5; epistemic ((−.5)² + .5²) / 2 = 0.25;
    # aleatoric (0.01 + 0.09) / 2 = 0.05; total 0.3
    row = out[out["mol_id"] == 1].iloc[0]
    assert row["y_pred"] == pytest.approx(1.5)
    assert row["y_std_epistemic"] == pytest.approx(0.5)
    assert row["y_std_aleatoric"] == pytest.approx(math.sqrt(0.05))
    assert row["y_std"] == pytest.approx(math.sqrt(0.3))
    assert list(out["set"]) == ["id", "ood", "val", "val"]
    assert metrics["seed"] == 7 and metrics["n_params"] == 20 and metrics["train_seconds"] == 3
    assert metrics["uq"]["method"] == "mve" and metrics["uq"]["members"] == 2
    assert metrics["uq"]["member_seeds"] == [7, 1007]
    assert set(metrics["uq"]["id"]) == {"total", "epistemic", "aleatoric"}
    assert "zscaling" in metrics["uq_recalibrated"]
    for name in ("metrics.json", "parity.png", "calibration.png", "confidence.png"):
        assert (tmp_path / name).is_file()


def test_cli_finds_members_in_index_order_and_matches_the_function(tmp_path):
    for k in (1, 0):
        write_member(tmp_path / "run", k)
    assert [p.name for p in find_members(tmp_path / "run")] == ["0", "1"]
    assert combine([str(tmp_path / "run" / "members"), "--out", str(tmp_path / "a")]) == 0
    combine_members(find_members(tmp_path / "run"), tmp_path / "b")
    a = pd.read_csv(tmp_path / "a" / "predictions.csv")
    pd.testing.assert_frame_equal(a, pd.read_csv(tmp_path / "b" / "predictions.csv"))


def test_members_without_variance_give_epistemic_only(tmp_path):
    dirs = [write_member(tmp_path, k, aleatoric=False) for k in (0, 1)]
    combine_members(dirs, tmp_path)
    out = pd.read_csv(tmp_path / "predictions.csv")
    assert "y_std_aleatoric" not in out
    np.testing.assert_allclose(out["y_std"], out["y_std_epistemic"])


@pytest.mark.parametrize(
    ("second", "message"),
    [
        ({"run_seed": 8}, "different seeds"),
        ({"task": "other"}, "differ in task"),
        ({"aleatoric": False}, "only some members"),
    ],
)
def test_members_of_different_runs_are_refused(tmp_path, second, message):
    first = write_member(tmp_path / "a", 0)
    other = write_member(tmp_path / "b", 1, **second)
    with pytest.raises(MemberError, match=message):
        combine_members([first, other], tmp_path / "out")


def test_cli_reports_a_folder_without_members(tmp_path, capsys):
    assert combine([str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert "no ensemble member" in capsys.readouterr().err


def test_cli_runs_the_chosen_calibrators_and_evaluators(tmp_path):
    """As `uq.calibrators` and `uq.evaluators` did in the members' runs."""
    for k in (0, 1):
        write_member(tmp_path / "run", k)
    members, out = str(tmp_path / "run"), str(tmp_path / "out")
    argv = [members, "--out", out, "--calibrators", "zscaling", "--evaluators", "nll"]
    assert combine(argv) == 0
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert list(metrics["uq_recalibrated"]) == ["zscaling"]
    assert list(metrics["uq"]["ood"]["total"]) == ["n", "nll"]
    assert combine([members, "--out", out, "--evaluators", "auce"]) == 2
