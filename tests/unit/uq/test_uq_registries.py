"""The three uncertainty registries (estimators, calibrators, evaluators): names refused
with the known ones listed, the configs naming what is registered, each estimator saying
what it needs, and the chosen calibrators and evaluators being the ones that run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from omegaconf import DictConfig, OmegaConf

from oodmol.config import compose_config, config_dir
from oodmol.predictions import SetPredictions
from oodmol.training.build import build_datamodule, uq_module_arguments
from oodmol.training.members import run_members, single_model_config
from oodmol.uq.assessment import assess_uncertainty
from oodmol.uq.calibrators import CALIBRATORS, CONFORMAL_NOTE
from oodmol.uq.dropout import FixedRateDropout, LearnedConcreteDropout
from oodmol.uq.estimators import ESTIMATORS, estimator_from_config
from oodmol.uq.evaluators import EVALUATORS
from oodmol.uq.likelihood import GaussianLikelihood
from oodmol.uq.registry import Registry, UnknownName
from oodmol.uq.seeds import member_seed

REGISTRIES = {"estimator": ESTIMATORS, "calibrator": CALIBRATORS, "evaluator": EVALUATORS}
UQ_CONFIGS = sorted(p.stem for p in (config_dir() / "uq").glob("*.yaml"))
Compose = Callable[..., DictConfig]


@pytest.fixture(scope="module")
def uq_config(tmp_path_factory: pytest.TempPathFactory) -> Compose:
    """`uq_config(*overrides)`: train.yaml composed on a two-molecule CSV task."""
    csv = tmp_path_factory.mktemp("uq_registries") / "mine.csv"
    csv.write_text("smiles,y\nCCO,1.0\nCCN,2.0\n")

    def compose(*overrides: str) -> DictConfig:
        task = ["task=csv", f"task.path={csv}", "task.target_column=y"]
        return compose_config("train", [*task, *overrides])

    return compose


@pytest.mark.parametrize("kind", REGISTRIES)
def test_an_unknown_name_is_refused_with_the_known_ones(kind: str) -> None:
    registry = REGISTRIES[kind]
    with pytest.raises(UnknownName) as refused:
        registry["no_such_method"]
    message = str(refused.value)
    assert f"unknown uncertainty {kind} 'no_such_method'" in message
    assert message.endswith("known: " + ", ".join(registry))
    with pytest.raises(UnknownName, match="no_such_method"):
        registry.select(["no_such_method"])


def test_a_registry_is_a_dict_filled_by_its_decorator() -> None:
    registry: Registry[object] = Registry("thing")

    @registry.register("a")
    class A:
        pass

    assert registry == {"a": A} and isinstance(registry, dict)
    with pytest.raises(ValueError, match="registered twice"):
        registry.register("a")(A)
    assert registry.select(None) == ["a"] and registry.select([]) == []


def test_the_registries_hold_todays_methods() -> None:
    assert list(ESTIMATORS) == [
        "none",
        "ensemble",
        "bootstrap",
        "mve",
        "mc_dropout",
        "concrete_dropout",
    ]
    assert list(CALIBRATORS) == ["zscaling", "conformal"]


def test_the_default_config_runs_every_calibrator_and_evaluator_in_registry_order(
    uq_config: Compose,
) -> None:
    uq = uq_config().uq
    assert list(uq.calibrators) == list(CALIBRATORS) == ["zscaling", "conformal"]
    assert list(uq.evaluators) == list(EVALUATORS)


@pytest.mark.parametrize("option", UQ_CONFIGS)
def test_every_uq_config_names_a_registered_estimator(option: str, uq_config: Compose) -> None:
    uq = uq_config(f"uq={option}").uq
    assert uq.estimator.name in ESTIMATORS
    estimator = estimator_from_config(uq)
    assert type(estimator) is ESTIMATORS[uq.estimator.name]
    assert estimator.members == uq.members


def test_each_estimator_says_what_it_needs(uq_config: Compose) -> None:
    def estimator(*overrides: str):
        return estimator_from_config(uq_config(*overrides).uq)

    assert estimator().module_arguments() == {} and estimator().members == 1
    assert estimator_from_config(None).members == 1
    ensemble = estimator("uq=ensemble", "uq.members=3")
    assert (ensemble.members, ensemble.resamples, ensemble.module_arguments()) == (3, False, {})
    assert estimator("uq=bootstrap").resamples and estimator("uq=bootstrap").members == 5
    mve = estimator("uq=mve", "uq.members=2")
    likelihood = mve.module_arguments()["likelihood"]
    assert mve.members == 2 and isinstance(likelihood, GaussianLikelihood)
    assert likelihood.min_variance == 1e-6
    mc = estimator("uq=mc_dropout", "uq.estimator.rate=0.3").module_arguments()
    assert type(mc["mc_dropout"]) is FixedRateDropout and mc["mc_dropout"].rate == 0.3
    assert mc["test_passes"] == 50
    concrete = estimator("uq=concrete_dropout").module_arguments()
    dropout = concrete["mc_dropout"]
    assert isinstance(dropout, LearnedConcreteDropout) and concrete["test_passes"] == 50
    assert (dropout.rate, dropout.temperature, dropout.length_scale) == (0.1, 0.1, 1e-4)
    # fresh objects each time: MC dropout keeps the layers of the model it was put into
    assert estimator("uq=mc_dropout").module_arguments()["mc_dropout"] is not mc["mc_dropout"]


def test_a_setting_the_estimator_does_not_have_is_refused(uq_config: Compose) -> None:
    uq = uq_config("uq=mve", "+uq.estimator.rate=0.1").uq
    with pytest.raises(ValueError, match=r"uq=mve: the estimator has no \['rate'\]"):
        estimator_from_config(uq)


@pytest.mark.parametrize(
    "legacy, option",
    [
        ({"name": "none", "members": 1, "module": {}}, "none"),
        ({"name": "bootstrap", "members": 5, "bootstrap": True, "module": {}}, "bootstrap"),
        (
            {
                "name": "mve",
                "members": 1,
                "module": {
                    "likelihood": {
                        "_target_": "oodmol.uq.likelihood.GaussianLikelihood",
                        "min_variance": 1e-6,
                    }
                },
            },
            "mve",
        ),
        (
            {
                "name": "concrete_dropout",
                "members": 1,
                "module": {
                    "mc_dropout": {
                        "_target_": "oodmol.uq.dropout.LearnedConcreteDropout",
                        "rate": 0.1,
                        "temperature": 0.1,
                        "length_scale": 1e-4,
                    },
                    "test_passes": 50,
                },
            },
            "concrete_dropout",
        ),
    ],
)
def test_a_checkpoint_config_from_before_estimators_gives_the_same_estimator(
    legacy: dict, option: str, uq_config: Compose
) -> None:
    """evaluate.py rebuilds a model from its checkpoint's config: one written before
    `uq.estimator` had the method's objects in `uq.module`."""
    old = estimator_from_config(OmegaConf.create({**legacy, "member": None}))
    assert old == estimator_from_config(uq_config(f"uq={option}").uq)


def test_module_arguments_come_from_the_estimator_and_are_refused_by_a_forest(
    uq_config: Compose,
) -> None:
    assert uq_module_arguments(uq_config("uq=ensemble")) == {}
    assert set(uq_module_arguments(uq_config("uq=mc_dropout"))) == {"mc_dropout", "test_passes"}
    rf = uq_config("model=rf", "uq=mve")
    with pytest.raises(ValueError, match=r"uq=mve sets \['likelihood'\] .*RandomForestModule"):
        uq_module_arguments(rf)


def test_only_the_bootstrap_estimator_resamples_the_training_set(uq_config: Compose) -> None:
    for option in UQ_CONFIGS:
        dm = build_datamodule(uq_config(f"uq={option}", "paths.data_dir=unused"))
        assert (dm.bootstrap_seed is not None) == (option == "bootstrap"), option


@pytest.mark.parametrize("field", ["calibrators", "evaluators"])
def test_an_unknown_calibrator_or_evaluator_stops_the_run_before_training(
    field: str, uq_config: Compose
) -> None:
    cfg = uq_config("uq=ensemble", f"uq.{field}=[no_such_thing]")
    trained = []
    with pytest.raises(UnknownName, match="no_such_thing"):
        run_members(cfg, trained.append)
    assert not trained


@pytest.mark.parametrize("option", ["mve", "ensemble"])
def test_an_unknown_calibrator_stops_a_single_model_before_training_too(
    option: str, uq_config: Compose
) -> None:
    """train.py asks `single_model_config` first, for a plain run and an ensemble alike."""
    with pytest.raises(UnknownName, match="no_such_thing"):
        single_model_config(uq_config(f"uq={option}", "uq.calibrators=[no_such_thing]"))


def test_a_run_trains_one_model_or_hands_an_ensemble_to_its_members(
    uq_config: Compose, tmp_path: Path
) -> None:
    """One model for a plain run (its own config) and for one member alone (the member's
    seed and folder); none for an ensemble's run, whose members `run_members` trains."""
    plain = uq_config("uq=mve")
    assert single_model_config(plain) is plain
    folder = f"paths.output_dir={tmp_path}"
    member = single_model_config(uq_config("uq=ensemble", "uq.member=2", folder))
    assert member is not None and member.uq.member == 2
    assert member.paths.output_dir == str(tmp_path)
    assert member.seed == member_seed(plain.seed, 2)
    assert single_model_config(uq_config("uq=ensemble")) is None


def sets() -> dict[str, SetPredictions]:
    rng = np.random.default_rng(0)

    def one(name: str, n: int) -> SetPredictions:
        y = rng.normal(size=n)
        sigma = rng.uniform(0.5, 1.5, size=n)
        ids = np.arange(n)
        return SetPredictions(name, ids, ids.astype(str), y, y + rng.normal(size=n), sigma)

    return {"id": one("id", 20), "ood": one("ood", 15), "val": one("val", 25)}


def test_the_chosen_calibrators_and_evaluators_are_the_ones_that_run() -> None:
    report = assess_uncertainty(
        sets(), {"method": "ensemble"}, ["conformal"], ["coverage", "nll", "verdict"]
    )
    uq, recalibrated = report.metrics["uq"], report.metrics["uq_recalibrated"]
    assert list(uq["id"]["total"]) == ["n", "coverage_68", "coverage_95", "nll", "verdict"]
    assert list(recalibrated) == ["conformal"]
    # conformal intervals have no distribution: nll is not scored, nor is n
    conformal = recalibrated["conformal"]
    assert conformal["note"] == CONFORMAL_NOTE
    assert list(conformal["ood"]) == ["coverage_68", "coverage_95", "verdict"]
    # only z-scaling draws a curve of its own in calibration.png
    assert report.curves["id"].recalibrated == {}
    everything = assess_uncertainty(sets(), {"method": "ensemble"})
    assert list(everything.curves["ood"].recalibrated) == ["z-scaled"]


def test_no_calibrator_means_no_recalibrated_section() -> None:
    report = assess_uncertainty(sets(), None, [], None)
    assert "uq_recalibrated" not in report.metrics
    assert report.metrics["uq"]["method"] == "native"


def test_unknown_names_are_refused_even_without_a_sigma() -> None:
    plain = {
        name: SetPredictions(name, s.mol_id, s.smiles, s.y_true, s.y_pred)
        for name, s in sets().items()
    }
    assert assess_uncertainty(plain) is None
    with pytest.raises(UnknownName, match="'auce'"):
        assess_uncertainty(plain, evaluators=["auce"])
