"""`oodmol data` end to end on the small public data sets and a user's file.

One data dir is shared by the whole module, so each data set is validated once.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
import pytest
from rdkit import Chem

from oodmol.cli import main
from oodmol.data.splits.splitters import murcko_scaffold

pytestmark = pytest.mark.slow

LIPO_URL = "https://deepchemdata.s3-us-west-1.amazonaws.com/datasets/Lipophilicity.csv"
SET_NAMES = {"train", "val", "id", "ood"}


FAILING = {
    "unknown_key": ["export", "task=lipophilicity", "nonsense=1"],
    "unknown_task": ["export", "task=nope"],
    "missing_source": ["export", "task=lipophilicity"],
}
FailingRuns = Callable[[str], subprocess.CompletedProcess]


@pytest.fixture(scope="module", autouse=True)
def failing_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FailingRuns]:
    """The bad invocations, started together in the background when the module starts
    (each pays two seconds of imports), with an empty OODMOL_SOURCE_DIR."""
    root = tmp_path_factory.mktemp("failing")
    (root / "empty").mkdir()
    env = {**os.environ, "OODMOL_DATA_DIR": str(root / "data")}
    env["OODMOL_SOURCE_DIR"] = str(root / "empty")
    running = {
        name: subprocess.Popen(
            [sys.executable, "-m", "oodmol.cli", "data", *args, "progress=false"],
            env=env,
            cwd=root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, args in FAILING.items()
    }
    done: dict[str, subprocess.CompletedProcess] = {}

    def result(name: str) -> subprocess.CompletedProcess:
        if name not in done:
            process = running[name]
            stdout, stderr = process.communicate(timeout=300)
            done[name] = subprocess.CompletedProcess(
                process.args, process.returncode, stdout, stderr
            )
        return done[name]

    yield result
    for process in running.values():
        if process.poll() is None:
            process.kill()
            process.communicate()


@pytest.fixture(scope="module")
def cli_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Working dir of the CLI runs; its data/ is OODMOL_DATA_DIR, shared by the module."""
    return tmp_path_factory.mktemp("cli")


def run_cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    """The data CLI with OODMOL_DATA_DIR=root/data (OODMOL_SOURCE_DIR as inherited)."""
    env = {**os.environ, "OODMOL_DATA_DIR": str(root / "data")}
    return subprocess.run(
        [sys.executable, "-m", "oodmol.cli", "data", *args, "progress=false"],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def source_rows(path: Path) -> list[list[str]]:
    """Data rows of a source CSV; row k (mol id k) is on line k + 2."""
    with open(path, newline="") as handle:
        return list(csv.reader(handle))[1:]


def canonical(smiles: str) -> str:
    return Chem.MolToSmiles(Chem.MolFromSmiles(smiles))


def test_export_lipophilicity_ood(cli_root: Path, source_dir: Path) -> None:
    """All 4,200 compounds with BOOM's sizes (OOD 10 % = 420); targets and SMILES are the
    source file's; the property's extremes are OOD."""
    out = cli_root / "lipo.csv"
    stdout = ok(run_cli(cli_root, "export", "task=lipophilicity", "split=ood", f"out={out}"))
    assert "lipophilicity: read 4200, kept 4200" in stdout
    frame = pd.read_csv(out)
    assert list(frame.columns) == ["mol_id", "smiles", "target", "set"]
    assert frame["mol_id"].tolist() == list(range(4200))
    # rest 3780: ID round(189.0), val round(359.1)
    assert frame["set"].value_counts().to_dict() == {
        "train": 3232,
        "val": 359,
        "id": 189,
        "ood": 420,
    }
    rows = source_rows(source_dir / "lipophilicity" / "lipophilicity.csv")
    by_id = frame.set_index("mol_id")
    for mol_id in (0, 1, 2, 1234, 4199):
        smiles, target = rows[mol_id]
        assert by_id.loc[mol_id, "target"] == float(target)
        assert by_id.loc[mol_id, "smiles"] == canonical(smiles)
    ood = frame[frame["set"] == "ood"]["target"]
    assert ood.min() == frame["target"].min()
    assert ood.max() == frame["target"].max()


def test_export_csd10k_random(cli_root: Path, source_dir: Path) -> None:
    """10k density with the random control: 1,000 held out; the three molecules missing
    from the export are repeats of earlier structures, each with slightly different DFT
    values (reported as conflicts, not plain duplicates)."""
    out = cli_root / "csd.csv"
    stdout = ok(run_cli(cli_root, "export", "task=csd10k_density", "split=random", f"out={out}"))
    assert "csd10k: read 10206, kept 10203" in stdout
    assert "3 dropped (duplicate structure with a different target)" in stdout
    assert "(duplicate structure)" not in stdout
    frame = pd.read_csv(out)
    assert list(frame.columns) == ["mol_id", "smiles", "target", "set"]
    assert set(frame["set"]) == SET_NAMES
    # rest 9203: ID round(460.15), val round(874.3)
    assert frame["set"].value_counts().to_dict() == {
        "train": 7869,
        "val": 874,
        "id": 460,
        "ood": 1000,
    }
    rows = source_rows(source_dir / "csd10k" / "10k_dft_density_data.csv")
    by_id = frame.set_index("mol_id")
    for mol_id in (0, 3, 5000, 10205):
        assert by_id.loc[mol_id, "target"] == float(rows[mol_id][1])
    missing = sorted(set(range(len(rows))) - set(frame["mol_id"]))
    assert len(missing) == 3
    first_of = dict(zip(frame["smiles"], frame["mol_id"], strict=True))
    for mol_id in missing:
        assert first_of[canonical(rows[mol_id][0])] < mol_id


USER_ROWS = [
    *[f"{'C' * k},{k * 0.4}" for k in range(1, 11)],
    *[f"{'C' * k}O,{1 - k * 0.3}" for k in range(1, 9)],
    "C1CC,1.0",  # mol 18: unparseable
    "CCN,",  # mol 19: no target
    *[
        f"{ring},{0.2 * i}"
        for i, ring in enumerate(
            ["c1ccccc1", "C1CCCCC1", "c1ccncc1", "C1CCOC1", "c1ccoc1", "C1CCNCC1",
             "c1ccc2ccccc2c1", "C1CC1", "c1cscn1", "C1CCC1", "Cc1ccccc1", "Oc1ccncc1"]
        )
    ],
]  # fmt: skip


def test_user_csv_with_scaffold_split(cli_root: Path) -> None:
    """A user's file goes through the same validation (bad rows reported on stdout) and
    the scaffold split keeps each scaffold in one set."""
    path = cli_root / "mine.csv"
    path.write_text("\n".join(["smiles,y", *USER_ROWS]) + "\n")
    out = cli_root / "mine-split.csv"
    stdout = ok(
        run_cli(
            cli_root,
            "export",
            "task=csv",
            f"task.path={path}",
            "task.target_column=y",
            "split=scaffold",
            f"out={out}",
        )
    )
    assert "1 dropped (unparseable SMILES)" in stdout
    assert "1 unreadable (empty y value)" in stdout
    assert "1 dropped (non-finite y)" in stdout
    frame = pd.read_csv(out)
    assert sorted(frame["mol_id"]) == [i for i in range(len(USER_ROWS)) if i not in (18, 19)]
    assert set(frame["set"]) <= SET_NAMES
    # 30 molecules: OOD round(3.0), ID round(1.35), val round(2.6)
    assert frame["set"].value_counts().to_dict() == {"train": 23, "val": 3, "ood": 3, "id": 1}
    frame["scaffold"] = [murcko_scaffold(s) for s in frame["smiles"]]
    assert (frame.groupby("scaffold")["set"].nunique() == 1).all()
    assert set(frame[frame["scaffold"] == ""]["set"]) == {"train"}


def test_card(cli_root: Path, source_dir: Path) -> None:
    """card writes a PNG, markdown and JSON whose counts add up to the task and whose
    hash is the persisted split's (the one export used)."""
    out = cli_root / "card"
    stdout = ok(run_cli(cli_root, "card", "task=lipophilicity", "split=ood", f"out={out}"))
    assert (out / "card.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads((out / "card.json").read_text())
    sizes = {name: s["n"] for name, s in summary["sets"].items()}
    assert sizes == {"train": 3232, "val": 359, "id": 189, "ood": 420}
    assert sum(sizes.values()) == 4200
    assert summary["task"] == "lipophilicity"
    assert summary["units"] == "log units"
    assert f"hash {summary['split_hash']}" in stdout
    markdown = (out / "card.md").read_text()
    assert markdown.startswith("# lipophilicity (ood split)")
    assert "| ood | 420 |" in markdown


def test_unknown_key_fails_with_hydras_message(failing_runs: FailingRuns) -> None:
    result = failing_runs("unknown_key")
    assert result.returncode == 2
    assert (
        "nonsense=1: there is no setting 'nonsense' (to add a new key on purpose, write "
        "+nonsense=1)" in result.stderr
    )
    assert "Traceback" not in result.stderr


def test_unknown_task_lists_the_available_ones(failing_runs: FailingRuns) -> None:
    """A short message and exit status 2, no traceback (details: test_data_cli_args.py)."""
    result = failing_runs("unknown_task")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("[oodmol data] task=nope: there is no task 'nope'; the ")
    for name in ("csd10k_density", "lipophilicity", "qm9_gap", "csv"):
        assert f" {name}," in result.stderr


def test_missing_source_file_names_the_env_var_and_url(failing_runs: FailingRuns) -> None:
    """An offline source dir without the file fails naming OODMOL_SOURCE_DIR and the URL."""
    result = failing_runs("missing_source")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "lipophilicity/lipophilicity.csv not found in OODMOL_SOURCE_DIR=" in result.stderr
    assert LIPO_URL in result.stderr


def test_no_command_prints_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data"]) == 2
    assert main(["data", "nonsense"]) == 2
    assert "export" in capsys.readouterr().err
