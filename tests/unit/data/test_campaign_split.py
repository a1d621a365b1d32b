"""split=ood_campaign: split=ood with the acquired pool molecules moved into training, a
pool subset drawn once, and the `oodmol campaign` arguments that set it up."""

from __future__ import annotations

import numpy as np
import pytest

from oodmol.campaign.settings import CampaignSettings, SettingsError, parse_arguments
from oodmol.data.splits.campaign import CampaignSplitter
from oodmol.data.splits.splitters import KDETailSplitter
from oodmol.data.table import MoleculeTable

N = 300
OOD_SIZE = 40


def _table() -> MoleculeTable:
    rng = np.random.default_rng(11)
    ids = rng.permutation(N).astype(np.int64) + 5  # rows not in id order
    smiles = np.array([f"C{i}" for i in ids], dtype=str)
    return MoleculeTable("synthetic", ids, smiles, {"y": rng.normal(size=N) ** 3})


def test_acquired_molecules_leave_the_pool_for_training_and_nothing_else_moves() -> None:
    table = _table()
    base = KDETailSplitter(OOD_SIZE).split(table, "y")
    start = CampaignSplitter(OOD_SIZE).split(table, "y")
    for name in ("train", "val", "id", "ood"):  # nothing acquired: split=ood's sets
        np.testing.assert_array_equal(start.sets[name], base.sets[name])
    acquired = base.sets["ood"][[3, 0, 17]].tolist()
    split = CampaignSplitter(OOD_SIZE, acquired=acquired).split(table, "y")
    np.testing.assert_array_equal(split.sets["ood"], np.setdiff1d(base.sets["ood"], acquired))
    np.testing.assert_array_equal(
        split.sets["train"], np.sort(np.concatenate([base.sets["train"], acquired]))
    )
    for name in ("val", "id"):
        np.testing.assert_array_equal(split.sets[name], base.sets[name])
    assert split.info["acquired"] == sorted(acquired) and split.info["pool"] == OOD_SIZE
    assert split.hash != start.hash  # a round is a split, and a run, of its own


def test_subset_is_drawn_once_before_any_acquisition() -> None:
    table = _table()
    base = KDETailSplitter(OOD_SIZE).split(table, "y")
    start = CampaignSplitter(OOD_SIZE, max_per_set=25).split(table, "y")
    for name in ("train", "val", "id", "ood"):
        assert len(start.sets[name]) == min(25, len(base.sets[name]))
        assert np.isin(start.sets[name], base.sets[name]).all()
    acquired = start.sets["ood"][:4].tolist()
    later = CampaignSplitter(OOD_SIZE, max_per_set=25, acquired=acquired).split(table, "y")
    np.testing.assert_array_equal(later.sets["train"], np.union1d(start.sets["train"], acquired))
    np.testing.assert_array_equal(later.sets["ood"], np.setdiff1d(start.sets["ood"], acquired))


def test_molecules_outside_the_pool_or_named_twice_are_refused() -> None:
    table = _table()
    base = KDETailSplitter(OOD_SIZE).split(table, "y")
    stranger = int(base.sets["train"][0])
    with pytest.raises(ValueError, match=rf"not in the campaign's pool of 40.*{stranger}"):
        CampaignSplitter(OOD_SIZE, acquired=[stranger]).split(table, "y")
    pooled = int(base.sets["ood"][0])
    with pytest.raises(ValueError, match="twice"):
        CampaignSplitter(OOD_SIZE, acquired=[pooled, pooled])
    with pytest.raises(ValueError, match="max_per_set"):
        CampaignSplitter(OOD_SIZE, max_per_set=0)


def test_campaign_arguments_are_its_own_and_the_rest_train_overrides() -> None:
    settings, overrides = parse_arguments(
        ["task=csd10k_density", "acquisition=ei", "rounds=4", "batch=50", "uq=ensemble",
         "kappa=1.5", "direction=both", "split.max_per_set=500"]
    )  # fmt: skip
    assert settings == CampaignSettings("ei", 4, 50, kappa=1.5, direction="both")
    assert overrides == ["task=csd10k_density", "uq=ensemble", "split.max_per_set=500"]
    # rounds (a campaign may be extended) and out (where it lies) are not its identity
    assert settings.identity() == {
        "acquisition": "ei", "batch": 50, "kappa": 1.5, "direction": "both", "top_fraction": 0.01
    }  # fmt: skip


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["acquisition=ucb", "rounds=2"], "needs batch="),
        (["acquisition=ucb", "rounds=two", "batch=1"], "rounds=two: not an integer"),
        (["acquisition=best", "rounds=2", "batch=1"], "acquisition must be one of"),
        (["acquisition=ucb", "rounds=0", "batch=1"], "rounds and batch must be >= 1"),
        (["acquisition=ucb", "rounds=1", "batch=1", "top_fraction=2"], "top_fraction"),
        (["acquisition=ucb", "rounds=1", "batch=1", "max_molecules=64"], "split.max_per_set"),
        (["acquisition=ucb", "rounds=1", "batch=1", "split=random"], "split=ood_campaign"),
        (["acquisition=ucb", "rounds=1", "batch=1", "hydra.run.dir=x"], "out=<dir>"),
        (["acquisition=ucb", "rounds=1", "batch=1", "verbose"], "key=value"),
    ],
)
def test_bad_campaign_arguments_are_refused_saying_why(arguments, message) -> None:
    with pytest.raises(SettingsError, match=message):
        parse_arguments(arguments)


def test_a_train_override_that_cannot_compose_stops_the_campaign_before_any_run(
    capsys: pytest.CaptureFixture, tmp_path
) -> None:
    from oodmol.cli import main

    base = ["acquisition=greedy", "rounds=1", "batch=1", f"out={tmp_path / 'c'}"]
    assert main(["campaign", *base, "model=nope"]) == 2
    assert "model=nope: there is no model 'nope'" in capsys.readouterr().err
    assert main(["campaign", *base, "model.nokey=3"]) == 2
    assert "model.nokey=3: there is no setting 'nokey' in model" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()
