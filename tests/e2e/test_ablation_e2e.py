"""BOOM's two ablations end to end through the real command lines, on the tiny task:
the transfer study (pretraining without the target's test molecules, frozen fine-tuning,
the un-pretrained baseline, the figure) and the OOD-augmentation sweep with its figure."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from e2e_helpers import MLP, QUIET, TinyTask

MESSAGE_PASSING = (
    "backbone.W_i.weight",
    "backbone.W_h.weight",
    "backbone.W_o.weight",
    "backbone.W_o.bias",
)


@pytest.fixture(scope="module")
def ablation(tmp_path_factory: pytest.TempPathFactory):
    task = TinyTask.create(tmp_path_factory.mktemp("ablation"))
    frame = task.molecules.copy()
    frame["y2"] = 1 - 2 * frame["y"]  # Pearson r = -1 with y
    two = task.root / "two.csv"
    frame.to_csv(two, index=False)
    template = (
        f"task=csv task.path={two} task.target_column={{p}} ++task.name=tiny-{{p}} "
        "++task.columns=[y,y2] task.ood_size=20"
    )
    study, aug = task.root / "study", task.root / "aug"
    task.submit_chain(
        (
            "study",
            [
                "-m", "oodmol.cli", "ablation", "transfer-run", str(study),
                "--properties", "y,y2", "--task", template, *QUIET,
                "model.hidden=16", "model.max_epochs=2",
            ],
        ),
        ("transfer_figure", ["-m", "oodmol.cli", "ablation", "transfer", str(study),
                             "--out", str(task.root / "fig")]),
    )  # fmt: skip
    task.submit_chain(
        (
            "augment",
            ["train.py", "-m", "experiment=boom_augmentation", "split.n_augment=0,4",
             *task.task_args(), *MLP, *QUIET, f"hydra.sweep.dir={aug}"],
        ),
        ("augmentation_figure", ["-m", "oodmol.cli", "ablation", "augmentation", str(aug),
                                 "--out", str(task.root / "fig")]),
    )  # fmt: skip
    task.submit("typo", ["train.py", *task.task_args(), *MLP, *QUIET, "model.freeze=[nope]"])
    task.notes.update(study=study, aug=aug, fig=task.root / "fig")
    yield task
    task.close()


def _metrics(folder: Path) -> dict:
    return json.loads((folder / "metrics.json").read_text())


def test_transfer_study_pretrains_without_the_targets_test_sets_and_freezes(ablation) -> None:
    ablation.result("study").ok()
    study = ablation.notes["study"]
    for source, target in (("y", "y2"), ("y2", "y")):
        pretrain = study / "pretrain" / f"{source}_for_{target}" / "0"
        finetune = study / "finetune" / f"{source}_to_{target}" / "0"
        scratch = study / "scratch" / target / "0"
        # the pretraining ran on the target's own split: its ID/OOD test molecules are
        # the target's and were never trained on
        assert _metrics(pretrain)["split_hash"] == _metrics(finetune)["split_hash"]
        assert _metrics(pretrain)["task"] == f"tiny-{source}"
        assert _metrics(scratch)["split_hash"] == _metrics(finetune)["split_hash"]
        assert "transfer" not in _metrics(scratch)
        record = _metrics(finetune)["transfer"]
        tested = _metrics(pretrain)["training"]["tested"]
        start = torch.load(pretrain / "checkpoints" / f"{tested}.ckpt", weights_only=True)
        end = torch.load(finetune / "checkpoints" / "last.ckpt", weights_only=True)
        for name in MESSAGE_PASSING:  # frozen: bit for bit the pretrained weights
            assert torch.equal(end["state_dict"][name], start["state_dict"][name]), name
        assert not torch.equal(  # trained on
            end["state_dict"]["head.net.0.weight"], start["state_dict"]["head.net.0.weight"]
        )
        assert record["init_from"]["task"] == f"tiny-{source}"
        assert record["frozen_values"] == sum(
            start["state_dict"][n].numel() for n in MESSAGE_PASSING
        )
        assert record["init_from"]["loaded"] == len(start["state_dict"]) - 2  # not y_mean/y_std


def test_transfer_figure_from_the_study(ablation) -> None:
    ablation.result("transfer_figure").ok()
    study, fig = ablation.notes["study"], ablation.notes["fig"]
    table = pd.read_csv(fig / "transfer.csv").set_index("source")
    assert sorted(table.index) == ["tiny-y", "tiny-y2"]
    np.testing.assert_allclose(table["pearson_r"], -1.0, atol=1e-12)
    for source, target in (("y", "y2"), ("y2", "y")):
        tuned = _metrics(study / "finetune" / f"{source}_to_{target}" / "0")["ood"]["rmse"]
        scratch = _metrics(study / "scratch" / target / "0")["ood"]["rmse"]
        row = table.loc[f"tiny-{source}"]
        assert row["target"] == f"tiny-{target}"
        assert row["normalised_ood_rmse"] == pytest.approx(tuned / scratch, rel=1e-12)
    assert (fig / "transfer.png").stat().st_size > 0 and (fig / "transfer.svg").is_file()


def test_augmentation_sweep_adds_pool_molecules_to_training_only(ablation) -> None:
    ablation.result("augment").ok()
    runs = {}
    for path in ablation.notes["aug"].rglob("metrics.json"):
        config = (path.parent / ".hydra" / "config.yaml").read_text()
        n = int(config.split("n_augment:")[1].split()[0])
        predictions = pd.read_csv(path.parent / "predictions.csv")
        runs[n] = (json.loads(path.read_text()), predictions)
    assert sorted(runs) == [0, 4]
    (m0, p0), (m4, p4) = runs[0], runs[4]
    for name in ("id", "ood", "val"):  # test sets and validation identical for every N
        assert sorted(p0[p0["set"] == name]["mol_id"]) == sorted(p4[p4["set"] == name]["mol_id"])
    assert m0["data"]["sizes"]["ood"] == 10  # hold-out: half of the 20 OOD molecules
    assert m4["data"]["sizes"]["train"] == m0["data"]["sizes"]["train"] + 4
    ablation.result("augmentation_figure").ok()
    table = pd.read_csv(ablation.notes["fig"] / "augmentation.csv")
    assert table["n_augment"].tolist() == [0, 4]
    expected = [1.0, m4["ood"]["rmse"] / m0["ood"]["rmse"]]
    np.testing.assert_allclose(table["normalised_ood_rmse"], expected, rtol=1e-12)


def test_a_freeze_name_matching_no_parameter_stops_the_run(ablation) -> None:
    result = ablation.result("typo").failed()
    assert result.returncode == 2
    assert "model.freeze=['nope']: no parameter of the model is under ['nope']" in result.stderr
