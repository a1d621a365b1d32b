"""Δ-learning end to end (`baseline=physics`): a forest learns what the physics estimate
leaves of the tiny task's property (Crippen's log P) and its predictions add the
estimate's line back; the record says so, `evaluate.py` rescoring and `oodmol predict`
from the checkpoint give the same predictions, and the run's key differs from the plain
forest's."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from e2e_helpers import QUIET, RF, TinyTask, ends_in_one_line

N = 60
DELTA = ["baseline=physics", "++task.physics_estimate=log_p"]


def predicts_as_the_run_did(tiny: TinyTask, run, name: str, count: int, rtol: float) -> None:
    """`oodmol predict` from the checkpoint the run tested (its best or its last epoch's)
    on `count` of its OOD molecules gives the predictions the run wrote."""
    tested = json.loads((run / "metrics.json").read_text())["training"]["tested"]
    predictions = pd.read_csv(run / "predictions.csv")
    ood = predictions[predictions["set"] == "ood"].head(count)
    molecules, out = tiny.root / f"{name}.csv", tiny.root / f"{name}-predicted.csv"
    ood[["smiles"]].to_csv(molecules, index=False)
    predict = ["-m", "oodmol.cli", "predict", f"ckpt_path={run / 'checkpoints' / f'{tested}.ckpt'}"]
    tiny.run([*predict, f"input={molecules}", f"out={out}", "progress=false"]).ok()
    np.testing.assert_allclose(pd.read_csv(out)["y_pred"], ood["y_pred"], rtol=rtol)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):
    task = TinyTask.create(tmp_path_factory.mktemp("delta"))
    task.molecules.head(N).to_csv(task.csv, index=False)  # xTB on 60 molecules, not 120
    yield task
    task.close()


def test_a_delta_run_adds_its_baseline_back(tiny: TinyTask) -> None:
    delta, plain = tiny.root / "delta", tiny.root / "plain"
    args = [*tiny.task_args(), *QUIET, *RF, "task.ood_size=10"]
    tiny.submit("delta", ["train.py", *args, *DELTA, f"hydra.run.dir={delta}"])
    tiny.submit("plain", ["train.py", *args, f"hydra.run.dir={plain}"])
    tiny.result("delta").ok()
    tiny.result("plain").ok()
    record = json.loads((delta / "metrics.json").read_text())
    fit = record["data"]["baseline"]
    assert (fit["name"], fit["columns"]) == ("physics", ["log_p"])
    assert fit["slopes"][0] > 0.3  # ALPB's log P follows Crippen's
    assert record["config_key"] != json.loads((plain / "metrics.json").read_text())["config_key"]
    predictions = pd.read_csv(delta / "predictions.csv")
    assert np.isfinite(predictions["y_pred"]).all()
    rescored = tiny.root / "rescored"
    command = ["evaluate.py", f"ckpt_path={delta / 'checkpoints' / 'last.ckpt'}", *QUIET]
    tiny.run([*command, f"hydra.run.dir={rescored}"]).ok()
    again = pd.read_csv(rescored / "predictions.csv")
    np.testing.assert_allclose(again["y_pred"], predictions["y_pred"], rtol=1e-9)
    ood = predictions[predictions["set"] == "ood"].head(5)
    molecules = tiny.root / "new.csv"
    ood[["smiles"]].to_csv(molecules, index=False)
    out = tiny.root / "predicted.csv"
    predict = ["-m", "oodmol.cli", "predict", f"ckpt_path={delta / 'checkpoints' / 'last.ckpt'}"]
    tiny.run([*predict, f"input={molecules}", f"out={out}", "progress=false"]).ok()
    np.testing.assert_allclose(pd.read_csv(out)["y_pred"], ood["y_pred"], rtol=1e-6)


def test_the_mean_with_a_baseline_is_the_baseline_alone(tiny: TinyTask) -> None:
    """`model=mean baseline=physics`: every prediction is the fitted line of the physics
    estimate, recomputed here from the molecules alone."""
    from oodmol.data.featurize.base import MolInput
    from oodmol.data.featurize.graph3d import Graph3D
    from oodmol.data.featurize.physics import COLUMNS, PhysicsEstimates

    run = tiny.root / "mean"
    args = [*tiny.task_args(), *QUIET, "model=mean", "task.ood_size=10", *DELTA]
    tiny.run(["train.py", *args, f"hydra.run.dir={run}"]).ok()
    fit = json.loads((run / "metrics.json").read_text())["data"]["baseline"]
    predictions = pd.read_csv(run / "predictions.csv").head(3)
    conformers, physics = Graph3D(seed=0), PhysicsEstimates()
    for smiles, predicted in zip(predictions["smiles"], predictions["y_pred"], strict=True):
        cloud = conformers(MolInput(smiles))
        x = physics(MolInput(smiles, cloud["z"], cloud["pos"]))["x"]
        expected = fit["intercept"] + fit["slopes"][0] * x[COLUMNS.index("log_p")]
        assert predicted == pytest.approx(expected, rel=1e-5)


def test_training_weights_weight_the_baselines_line(tiny: TinyTask) -> None:
    """With `weighting=tails` the line is fitted with the run's training weights: the
    record says so, and its fit is not the plain one; `evaluate.py` scores the checkpoint
    with the line it holds (a fit anew, without the weights, moved every prediction)."""
    fits = {}
    for name, extra in (("unweighted", []), ("weighted", ["weighting=tails"])):
        args = [*tiny.task_args(), *QUIET, "model=mean", "task.ood_size=10", *DELTA, *extra]
        tiny.submit(name, ["train.py", *args, f"hydra.run.dir={tiny.root / name}"])
    for name in ("unweighted", "weighted"):
        tiny.result(name).ok()
        fits[name] = json.loads((tiny.root / name / "metrics.json").read_text())["data"]["baseline"]
    assert not fits["unweighted"]["weighted"] and fits["weighted"]["weighted"]
    plain, weighted = fits["unweighted"]["slopes"][0], fits["weighted"]["slopes"][0]
    assert weighted != pytest.approx(plain, rel=1e-3)
    run, rescored = tiny.root / "weighted", tiny.root / "weighted-rescored"
    tested = json.loads((run / "metrics.json").read_text())["training"]["tested"]
    checkpoint = run / "checkpoints" / f"{tested}.ckpt"
    tiny.run(["evaluate.py", f"ckpt_path={checkpoint}", *QUIET, f"hydra.run.dir={rescored}"]).ok()
    again = pd.read_csv(rescored / "predictions.csv")["y_pred"]
    np.testing.assert_allclose(again, pd.read_csv(run / "predictions.csv")["y_pred"], rtol=1e-9)


def test_a_calibration_line_regresses_the_estimate_on_the_property(tiny: TinyTask) -> None:
    """`baseline.fit=calibration`: the line is the estimate regressed on the property over
    the training molecules, solved for the property (slope var(y)/cov(x, y)), recomputed
    here by hand from the run's estimates; the record says so, the run has a key of its
    own, and `evaluate.py` scores its checkpoint with the line it holds."""
    from hydra.utils import instantiate

    from oodmol.config import compose_config
    from oodmol.data.task import load_split, load_task
    from oodmol.report.collect import model_label

    args = [*tiny.task_args(), *QUIET, "model=mean", "task.ood_size=10", *DELTA]
    runs = {"squares": [], "calibration": ["baseline.fit=calibration"]}
    for name, extra in runs.items():
        tiny.submit(name, ["train.py", *args, *extra, f"hydra.run.dir={tiny.root / name}"])
    records = {}
    for name in runs:
        tiny.result(name).ok()
        records[name] = json.loads((tiny.root / name / "metrics.json").read_text())
    fit = records["calibration"]["data"]["baseline"]
    assert fit["fit"] == "calibration" and "fit" not in records["squares"]["data"]["baseline"]
    assert model_label(records["calibration"]) == "mean Δphysics (fit=calibration)"
    assert records["calibration"]["config_key"] != records["squares"]["config_key"]
    cfg = compose_config("train", [*args, "baseline.fit=calibration"])
    data = load_task(instantiate(cfg.task), tiny.data_dir, progress=False)
    split = load_split(data, instantiate(cfg.split), tiny.data_dir)  # the run's own split
    baseline = instantiate(cfg.baseline)
    baseline.open(data.table, tiny.data_dir, progress=False)
    train = np.array(
        [i for i in split.sets["train"] if i not in baseline.unusable(split.sets["train"])]
    )
    x = baseline.estimate(train)[:, 0]
    y = data.y[data.table.rows_of(train)].astype(np.float64)
    slope = np.var(y) / np.cov(x, y, bias=True)[0, 1]
    assert (fit["intercept"], *fit["slopes"]) == pytest.approx(
        (y.mean() - slope * x.mean(), slope), rel=1e-6
    )
    run, rescored = tiny.root / "calibration", tiny.root / "calibration-rescored"
    tested = records["calibration"]["training"]["tested"]
    checkpoint = run / "checkpoints" / f"{tested}.ckpt"
    tiny.run(["evaluate.py", f"ckpt_path={checkpoint}", *QUIET, f"hydra.run.dir={rescored}"]).ok()
    again = pd.read_csv(rescored / "predictions.csv")["y_pred"]
    np.testing.assert_allclose(again, pd.read_csv(run / "predictions.csv")["y_pred"], rtol=1e-9)


def test_a_fit_of_several_estimates_gives_each_its_own_slope(tiny: TinyTask) -> None:
    """`baseline=physics_descriptors` with two columns, one physics estimate and one RDKit
    descriptor: every prediction of the mean is the fitted plane of the two, recomputed
    here from the molecules alone (Crippen's log P by RDKit directly), and `oodmol
    predict` from the checkpoint reads the same two columns."""
    from rdkit import Chem
    from rdkit.Chem import Crippen

    from oodmol.data.featurize.base import MolInput
    from oodmol.data.featurize.graph3d import Graph3D
    from oodmol.data.featurize.physics import COLUMNS, PhysicsEstimates

    run = tiny.root / "plane"
    several = ["baseline=physics_descriptors", "baseline.column=[log_p,MolLogP]"]
    args = [*tiny.task_args(), *QUIET, "model=mean", "task.ood_size=10", *several]
    tiny.run(["train.py", *args, f"hydra.run.dir={run}"]).ok()
    fit = json.loads((run / "metrics.json").read_text())["data"]["baseline"]
    assert (fit["name"], fit["columns"]) == ("physics_descriptors", ["log_p", "MolLogP"])
    assert len(fit["slopes"]) == 2 and fit["slopes"][0] != fit["slopes"][1]
    predictions = pd.read_csv(run / "predictions.csv").head(3)
    conformers, physics = Graph3D(seed=0), PhysicsEstimates()
    for smiles, predicted in zip(predictions["smiles"], predictions["y_pred"], strict=True):
        cloud = conformers(MolInput(smiles))
        log_p = physics(MolInput(smiles, cloud["z"], cloud["pos"]))["x"][COLUMNS.index("log_p")]
        crippen = Crippen.MolLogP(Chem.MolFromSmiles(smiles))
        expected = fit["intercept"] + fit["slopes"][0] * log_p + fit["slopes"][1] * crippen
        assert predicted == pytest.approx(expected, rel=1e-5)
    predicts_as_the_run_did(tiny, run, "plane", 3, rtol=1e-6)  # the checkpoint's columns


def test_both_together_reads_the_descriptors_beside_the_physics(tiny: TinyTask) -> None:
    """`model/representation=descriptors_physics`: ridge regression on RDKit's descriptors
    and the physics estimates side by side, the physics cache the Δ runs built; its
    checkpoint predicts new molecules as the run did."""
    import torch

    from oodmol.data.featurize.base import MolInput
    from oodmol.data.featurize.descriptors import RDKitDescriptors
    from oodmol.data.featurize.physics import COLUMNS

    run = tiny.root / "both"
    both = ["model=ridge", "model/representation=descriptors_physics", "task.ood_size=10"]
    tiny.run(["train.py", *tiny.task_args(), *QUIET, *both, f"hydra.run.dir={run}"]).ok()
    record = json.loads((run / "metrics.json").read_text())
    assert record["model"] == "descriptors_physics-ridge"
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    width = len(checkpoint["oodmol_features"]["imputer_means"])
    assert width == len(RDKitDescriptors()(MolInput("CCO"))["x"]) + len(COLUMNS)
    predicts_as_the_run_did(tiny, run, "both", 4, rtol=1e-6)


def test_chemprop_reads_the_descriptors_and_physics_beside_its_graphs(tiny: TinyTask) -> None:
    """`model=chemprop_descriptors` with Δ-learning: the D-MPNN's FFN reads the scaled
    descriptors and physics estimates beside each pooled graph (its first layer is that
    much wider), and its checkpoint predicts new molecules as the run did."""
    import torch

    from oodmol.data.featurize.base import MolInput
    from oodmol.data.featurize.descriptors import RDKitDescriptors
    from oodmol.data.featurize.physics import COLUMNS

    run = tiny.root / "chemprop"
    small = ["model.hidden=16", "model.max_epochs=2", "task.ood_size=10"]
    args = [*tiny.task_args(), *QUIET, "model=chemprop_descriptors", *small, *DELTA]
    tiny.run(["train.py", *args, f"hydra.run.dir={run}"]).ok()
    record = json.loads((run / "metrics.json").read_text())
    assert record["model"] == "chemprop_descriptors"
    assert record["data"]["baseline"]["columns"] == ["log_p"]
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    width = len(RDKitDescriptors()(MolInput("CCO"))["x"]) + len(COLUMNS)
    assert len(checkpoint["oodmol_features"]["vectors"]["mean"]) == width
    assert checkpoint["state_dict"]["backbone.ffn.0.weight"].shape == (16, 16 + width)
    predicts_as_the_run_did(tiny, run, "chemprop", 4, rtol=1e-5)
    # a checkpoint whose learnt vectors were taken out is refused in one line
    del checkpoint["oodmol_features"]["vectors"]
    tampered = tiny.root / "tampered.ckpt"
    torch.save(checkpoint, tampered)
    molecules = tiny.root / "chemprop.csv"
    predict = ["-m", "oodmol.cli", "predict", f"ckpt_path={tampered}", f"input={molecules}"]
    result = tiny.run([*predict, f"out={tiny.root / 'tampered.csv'}", "progress=false"])
    last = ends_in_one_line(result, 2)
    assert "oodmol_features) does not fit its model.features" in last


@pytest.mark.parametrize(
    ("overrides", "phrase"),
    [
        (["model=chemprop", "+model.features.vectors._target_=oodmol.data.features.VectorFeatures",
          "+model.features.vectors.field=x_d"], "holds graphs alone"),
        (["model=chemprop", "+model.module.backbone.descriptor_dim=5"], "its batches have none"),
    ],
)  # fmt: skip
def test_descriptors_asked_of_graphs_without_them_are_refused_in_one_line(
    tiny: TinyTask, overrides: list[str], phrase: str
) -> None:
    run = tiny.root / f"refused-{len(overrides)}"
    args = [*tiny.task_args(), *QUIET, *overrides, "model.max_epochs=1", "task.ood_size=10"]
    result = tiny.run(["train.py", *args, f"hydra.run.dir={run}"])
    assert phrase in ends_in_one_line(result, 2)
