"""The `oodmol` command: its subcommands reach every tool, and `oodmol predict` predicts
new molecules from a checkpoint alone, as the run predicted its own test molecules,
naming every row it cannot predict."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from e2e_helpers import MLP, QUIET, RF, Result, TinyTask, load_tiny_split
from rdkit import Chem

from oodmol.inference.predict import _validated

OODMOL = str(Path(sys.executable).parent / "oodmol")  # the console script pyproject declares
# a tiny Regression Transformer: its predictions carry the per-molecule `malformed` flag
RT = ["model=rt", "model.max_epochs=2", *[f"model.module.backbone.{o}" for o in
      ("layers=2", "heads=2", "hidden=16", "intermediate=32")]]  # fmt: skip


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory):
    task = TinyTask.create(tmp_path_factory.mktemp("cli"))
    root = task.root

    def oodmol(*args: str) -> Result:
        return _run(task, list(args))

    data, split = load_tiny_split(task)
    ids = split.sets["id"].tolist()
    smiles_of = dict(zip(data.table.mol_id.tolist(), data.table.smiles.tolist(), strict=True))
    rows = [("id", _respelled(smiles_of[i])) for i in ids]
    rows[1:1] = [("bad", "C1CC"), ("blank", "")]
    (root / "new.csv").write_text(
        "name,smiles\n" + "\n".join(f"{name},{smiles}" for name, smiles in rows) + "\n"
    )
    task.notes.update(ids=ids, rows=rows)
    for model, args in (("mlp", MLP), ("rf", RF), ("rt", RT)):
        run = root / model
        train = ["train", *task.task_args(), *QUIET, *args, f"hydra.run.dir={run}"]
        predict = [
            "predict", f"ckpt_path={run / 'checkpoints' / 'best.ckpt'}",
            f"input={root / 'new.csv'}", f"out={root / f'{model}.csv'}", "progress=false",
        ]  # fmt: skip
        if model == "mlp":  # the console script, re-executing Hydra's apps as a user meets it
            steps = [lambda t=train: oodmol(*t), lambda p=predict: oodmol(*p)]
        else:  # the same commands forked from the zygote: only the imports are skipped
            steps = [["-m", "oodmol.cli", *train], ["-m", "oodmol.cli", *predict]]
        task.submit_chain((model, steps[0]), (f"{model}_predict", steps[1]))
    task.submit("help", lambda: oodmol("--help"))
    task.submit("unknown", lambda: oodmol("fly"))
    task.submit(
        "export",
        lambda: oodmol("data", "export", *task.task_args(), f"out={root / 'export.csv'}"),
    )
    yield task
    task.close()


def _run(task: TinyTask, args: list[str]) -> Result:
    """The console script, run as a user runs it (it re-executes Hydra's apps)."""
    started = time.monotonic()
    proc = subprocess.run(
        [OODMOL, *args], cwd=task.root, env=task.env, capture_output=True, text=True, timeout=480
    )
    return Result([OODMOL, *args], proc.returncode, proc.stdout, proc.stderr,
                  time.monotonic() - started, started)  # fmt: skip


def _respelled(smiles: str) -> str:
    """Another valid spelling of the molecule (predict canonicalises as training does)."""
    mol = Chem.MolFromSmiles(smiles)
    for seed in range(50):
        spelling = Chem.MolToRandomSmilesVect(mol, 1, randomSeed=seed)[0]
        if spelling != smiles:
            return spelling
    return smiles


def test_help_lists_every_command(cli: TinyTask) -> None:
    out = cli.result("help").ok().stdout
    for command in ("train", "evaluate", "predict", "data", "report", "uq", "campaign"):
        assert f"oodmol {command}" in out


def test_unknown_command_is_refused(cli: TinyTask) -> None:
    result = cli.result("unknown")
    assert result.returncode == 2 and "unknown command 'fly'" in result.stderr


def test_data_tools_run_through_the_command(cli: TinyTask) -> None:
    cli.result("export").ok()
    assert set(pd.read_csv(cli.root / "export.csv")["set"]) == {"train", "val", "id", "ood"}


@pytest.mark.parametrize("model", ["mlp", "rf", "rt"])
def test_predict_matches_the_runs_own_test_predictions(cli: TinyTask, model: str) -> None:
    cli.result(model).ok()
    out = cli.result(f"{model}_predict").ok().stdout
    n_rows = len(cli.notes["rows"])
    assert f"predicted {n_rows - 2} of {n_rows} molecules" in out
    predicted = pd.read_csv(cli.root / f"{model}.csv", keep_default_na=False)
    assert len(predicted) == n_rows  # no row lost, in the input's order
    assert predicted["line"].tolist() == list(range(2, n_rows + 2))
    ok = predicted[predicted["error"] == ""]
    own = pd.read_csv(cli.root / model / "predictions.csv")
    own = own[own["set"] == "id"].set_index("mol_id")
    expected = own.loc[cli.notes["ids"]]
    np.testing.assert_allclose(ok["y_pred"].astype(float), expected["y_pred"], rtol=1e-6)
    assert ok["canonical_smiles"].tolist() == expected["smiles"].tolist()
    if model == "rf":  # the forest's spread over trees comes along
        np.testing.assert_allclose(ok["y_std"].astype(float), expected["y_std"], rtol=1e-6)
    if model == "rt":  # and the RT's malformed decodes, marked as in its predictions.csv
        assert ok["malformed"].astype(int).tolist() == expected["malformed"].tolist()
        assert (predicted[predicted["error"] != ""]["malformed"] == "").all()


@pytest.mark.parametrize("model", ["mlp", "rf"])
def test_predict_names_every_row_it_cannot_predict(cli: TinyTask, model: str) -> None:
    result = cli.result(f"{model}_predict").ok()
    assert "new.csv line 3: not predicted (unparseable SMILES)" in result.stderr
    assert "new.csv line 4: not predicted (empty SMILES)" in result.stderr
    predicted = pd.read_csv(cli.root / f"{model}.csv", keep_default_na=False)
    bad = predicted[predicted["error"] != ""]
    assert bad[["line", "error"]].values.tolist() == [
        [3, "unparseable SMILES"],
        [4, "empty SMILES"],
    ]
    assert (bad["y_pred"] == "").all()


def test_new_molecules_are_checked_as_training_molecules_are() -> None:
    rows = [(2, "CCO"), (3, "CC[Si](C)C"), (4, "c1ccccc1F"), (5, "C(C)(C)(C)(C)C")]
    canonical, rejected = _validated(rows, ["C", "H", "N", "O"], progress=False)
    assert canonical == {2: "CCO"}
    assert rejected == {
        3: "element Si outside the training data's ['C', 'H', 'N', 'O']",
        4: "element F outside the training data's ['C', 'H', 'N', 'O']",
        5: "RDKit sanitisation failed: AtomValenceException",
    }
