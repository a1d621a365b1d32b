"""Received files: the one rule where a string becomes a path (`oodmol.names`), bounded
reading (`oodmol.bounded`), and a stored config rebuilt from the project's own configs
(`oodmol.stored_config`), each with known answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from oodmol.bounded import OversizedInputError, check_shape, read_json
from oodmol.config import compose_config
from oodmol.data.sources.fetch import RemoteFile
from oodmol.errors import UserError
from oodmol.names import UnsafeNameError, check_name, check_url, inside, safe_stem
from oodmol.stored_config import UntrustedConfigError, rebuild

URL = "https://example.org/set.csv"
SHA = "sha256:" + "0" * 64


@pytest.mark.parametrize("name", ["csd10k_density", "soap-krr_rbf", "ood_of_density", "mlp+mve"])
def test_names_of_the_configs_pass(name: str) -> None:
    assert check_name(name, "x") == name


@pytest.mark.parametrize("name", ["../x", "a/b", "/abs", ".hidden", "..", "", "a b", "x" * 129, 3])
def test_names_that_would_become_other_paths_are_refused(name: object) -> None:
    with pytest.raises(UnsafeNameError, match="a name must be"):
        check_name(name, "task.name")


def test_a_file_stem_becomes_a_name() -> None:
    assert safe_stem("my data (v2)") == "my_data__v2_"
    assert check_name(safe_stem("..secret/../x"), "x")


def test_inside_keeps_paths_in_their_folder(tmp_path: Path) -> None:
    assert inside(tmp_path, "csd10k/a.csv", "x") == tmp_path.resolve() / "csd10k" / "a.csv"
    for relative in ("../a", "/etc/passwd", "a/../../b", ""):
        with pytest.raises(UnsafeNameError):
            inside(tmp_path, relative, "x")
    (tmp_path / "out").symlink_to("/")  # a link out of the folder is followed, then refused
    with pytest.raises(UnsafeNameError, match="outside"):
        inside(tmp_path, "out/etc/passwd", "x")


@pytest.mark.parametrize("url", ["http://x.org/a", "data:text/plain,x", "file:///etc/passwd", "x"])
def test_only_https_is_fetched(url: str) -> None:
    with pytest.raises(UnsafeNameError, match="only https"):
        check_url(url, "u")
    with pytest.raises(UnsafeNameError):
        RemoteFile("set.csv", url, SHA)


@pytest.mark.parametrize("relpath", ["../x.csv", "/tmp/x.csv", "a/../../x.csv"])
def test_a_source_file_lies_inside_its_folder(relpath: str) -> None:
    with pytest.raises(UnsafeNameError):
        RemoteFile(relpath, URL, SHA)
    with pytest.raises(UserError, match="checksum"):
        RemoteFile("a.csv", URL, "crc32:00")


def test_read_json_refuses_what_oodmol_never_writes(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"a": [1, 2]}))
    assert read_json(path, "record") == {"a": [1, 2]}
    path.write_text("[" * 50_000 + "]" * 50_000)
    with pytest.raises(OversizedInputError, match="nested"):
        read_json(path, "record")
    path.write_text(json.dumps(list(range(1000))))
    with pytest.raises(OversizedInputError, match="more than any record"):
        read_json(path, "record", limit=100)


def test_check_shape_counts_depth_values_and_text() -> None:
    deep: list = []
    node = deep
    for _ in range(10):
        node.append([])
        node = node[0]
    check_shape(deep, "w", "x", max_depth=10)
    with pytest.raises(OversizedInputError, match="nested more than 9"):
        check_shape(deep, "w", "x", max_depth=9)
    with pytest.raises(OversizedInputError, match="more than 5 values"):
        check_shape(list(range(5)), "w", "x", max_nodes=5)
    with pytest.raises(OversizedInputError, match="a text of 11"):
        check_shape({"k": "x" * 11}, "w", "x", max_string=10)


# --- a stored config rebuilt from the configs ---------------------------------------------

KEEP = ("task", "split", "model", "uq", "protocol", "trainer", "seed")


@pytest.fixture(scope="module")
def stored() -> dict:
    """What train.py stores for `model=egnn task=csd10k_density` (resolved)."""
    cfg = compose_config("train", ["model=egnn", "task=csd10k_density", "trainer=cpu"])
    cfg.paths.output_dir = "/somewhere/else"  # where the run wrote, on its machine
    resolved = OmegaConf.to_container(cfg, resolve=True)
    return {key: resolved[key] for key in KEEP}


def changed(stored: dict, keys: str, value: object) -> dict:
    copy = json.loads(json.dumps(stored))
    node = copy
    *parents, last = keys.split(".")
    for key in parents:
        node = node[key]
    node[last] = value
    return copy


def test_a_stored_config_comes_back_as_the_configs_compose_it(stored: dict) -> None:
    cfg = rebuild(changed(stored, "model.module.backbone.hidden", 32), "ckpt", KEEP)
    assert cfg.model.name == "egnn" and cfg.model.module.backbone.hidden == 32
    assert cfg.task.source.files[0].relpath == "csd10k/10k_dft_density_data.csv"
    # where the run wrote was its machine's: the setting stays this installation's own
    assert OmegaConf.to_container(cfg.trainer)["default_root_dir"] == "${paths.output_dir}"


@pytest.mark.parametrize(
    ("keys", "value", "phrase"),
    [
        ("task.source.files", [{"relpath": "../x", "url": URL, "checksum": SHA}], "never a"),
        ("task.source.name", "other", "never a received file's"),
        ("task.source.limits.max_atoms", 10**9, "looser than this installation's 1000"),
        ("task.source.limits.time_limit", None, "looser than this installation's 60"),
        ("task.source.limits.max_atoms", 0, "a limit must be positive"),
        ("task.name", "../x", "a name must be"),
        ("model.module.backbone.hidden", [64], "holds a list where the configs hold a int"),
        ("model.module.optimizer.lr", float("inf"), "out of any setting's range"),
        ("model.module.optimizer.lr", "fast", "is a str; the configs hold a float"),
        ("model.module.backbone.surprise", 1, "is not a setting"),
        ("model.batch_size", 0, "model.batch_size must be a whole number ≥ 1"),
        ("trainer.precision", "9-bit", "must be one of"),
        ("model.module.optimizer", {"_target_": "torch.optim.Adam", "nope": 1}, "optimizer.nope"),
        ("model.name", "gnn_of_my_own", "is none of this installation's model configs"),
    ],
)
def test_values_that_the_configs_would_not_hold_are_refused(
    stored: dict, keys: str, value: object, phrase: str
) -> None:
    with pytest.raises(UntrustedConfigError, match=phrase.replace("(", r"\(")):
        rebuild(changed(stored, keys, value), "ckpt", KEEP)


def test_a_stricter_limit_and_another_buildable_target_are_taken(stored: dict) -> None:
    config = changed(stored, "task.source.limits.max_atoms", 50)
    config = changed(config, "model.module.optimizer", {"_target_": "torch.optim.Adam", "lr": 0.5})
    cfg = rebuild(config, "ckpt", KEEP)
    assert cfg.task.source.limits.max_atoms == 50
    assert cfg.model.module.optimizer._target_ == "torch.optim.Adam"  # egnn's is AdamW
    assert cfg.model.module.optimizer.lr == 0.5


@pytest.mark.parametrize(
    ("model", "keys", "earlier"),
    [
        ("rf", "model.module._target_", "oodmol.models.sklearn.RandomForestModule"),
        ("mean", "model.module._target_", "oodmol.models.training_mean.TrainingMeanModule"),
        (
            "krr_rbf",
            "model.module._target_",
            "oodmol.models.kernel_regression.KernelRegressionModule",
        ),
        ("rt", "model.module._target_", "oodmol.models.rt.RegressionTransformer"),
        (
            "rt",
            "model.pretraining.corruption._target_",
            "oodmol.models.rt_pretraining.SpanPermutation",
        ),
    ],
)
def test_a_target_named_at_its_earlier_place_is_read_at_its_present_one(
    model: str, keys: str, earlier: str
) -> None:
    """A checkpoint written before its model's module moved names the earlier place."""
    cfg = compose_config("train", [f"model={model}", "task=csd10k_density", "trainer=cpu"])
    cfg.paths.output_dir = "/somewhere/else"
    resolved = OmegaConf.to_container(cfg, resolve=True)
    stored = {key: resolved[key] for key in KEEP}
    again = rebuild(changed(stored, keys, earlier), "ckpt", KEEP)
    assert OmegaConf.select(again, keys) == OmegaConf.select(cfg, keys) != earlier


def test_nested_groups_and_name_templates_are_chosen(tmp_path: Path) -> None:
    """A kernel model on SOAP (`soap-krr_rbf`) and a split named by its property come
    back as model=krr_rbf model/representation=soap and split=ood_of."""
    overrides = ["model=krr_rbf", "model/representation=soap", "split=ood_of", "trainer=cpu"]
    overrides += ["split.property=density"]
    cfg = compose_config("train", overrides)
    keep = ("model", "split")
    stored = {k: OmegaConf.to_container(cfg[k], resolve=True) for k in keep}
    again = rebuild(stored, "ckpt", keep)
    assert again.model.name == "soap-krr_rbf" and again.split.name == stored["split"]["name"]


def test_a_derived_value_set_to_a_list_comes_back_and_its_items_are_values() -> None:
    """`baseline.column` derives the task's estimate; a run that fitted several estimates
    stored their list, which comes back (not the task's one estimate); a list holding
    settings is refused."""
    keep = (*KEEP, "baseline")
    columns = ["log_p", "MolLogP", "ionisation"]
    overrides = ["task=lipophilicity", "baseline=physics_descriptors", f"baseline.column={columns}"]
    cfg = compose_config("train", [*overrides, "trainer=cpu"])
    cfg.paths.output_dir = "/somewhere/else"
    resolved = OmegaConf.to_container(cfg, resolve=True)
    stored = {key: resolved[key] for key in keep}
    assert list(rebuild(stored, "ckpt", keep).baseline.column) == columns
    single = rebuild(changed(stored, "baseline.column", "log_d"), "ckpt", keep)
    assert single.baseline.column == "log_d"
    for planted, phrase in (
        ([{"_target_": "os.system"}], "never build"),
        ([{"column": "log_p"}], "holds a list of settings"),
    ):
        with pytest.raises(UntrustedConfigError, match=phrase):
            rebuild(changed(stored, "baseline.column", planted), "ckpt", keep)
