"""The vectors the Python API hands out (`BenchmarkTask.features`) are those of the
cache a model of the same representation reads on the same task: the featuriser is
built as train.py builds it, task-dependent settings included."""

from __future__ import annotations

import pytest
from hydra.utils import instantiate

from oodmol.benchmark.benchmark_task import featurizer_config
from oodmol.config import compose_config
from oodmol.errors import InputError


@pytest.mark.parametrize(
    ("task", "kind"),
    [
        ("qm9_homo", "physics"),  # QM9's tasks ask for no solvation estimates
        ("lipophilicity", "physics"),
        ("csd10k_density", "soap"),  # the data set's own elements
        ("qm9_homo", "descriptors"),
    ],
)
def test_the_api_builds_the_featuriser_a_model_reads(task: str, kind: str) -> None:
    train = compose_config("train", [f"task={task}", "model=ridge", f"model/representation={kind}"])
    api = instantiate(featurizer_config(kind, train.task))
    assert api.params() == instantiate(train.model.featurizer).params()


def test_a_featuriser_without_a_representation_and_an_unknown_name() -> None:
    task = compose_config("train", ["task=lipophilicity"]).task
    assert instantiate(featurizer_config("morgan", task)).name == "morgan"
    with pytest.raises(InputError, match="no representation or featuriser of that name"):
        featurizer_config("morgn", task)
