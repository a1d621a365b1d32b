"""`oodmol data` with a name it does not know: a short message on stderr and
exit status 2, before any data is read (in process; test_data_cli.py runs the real
command line once)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oodmol.cli import main
from oodmol.config import config_dir


@pytest.mark.parametrize(
    ("argument", "group"),
    [
        ("task=xyzzy", "task"),
        ("split=xyzzy", "split"),
        ("featurizers=[morgan,xyzzy]", "featurizer"),
        ("featurizers=xyzzy", "featurizer"),
    ],
)
def test_unknown_name_lists_the_available_ones(
    argument: str, group: str, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["data", "prepare", "task=lipophilicity", argument]) == 2
    err = capsys.readouterr().err
    known = sorted(path.stem for path in (config_dir() / group).glob("*.yaml"))
    assert len(known) >= 3
    assert err == (
        f"[oodmol data] {argument}: there is no {group} 'xyzzy'; the choices are "
        f"{', '.join(known)} (configs/{group}/*.yaml)\n"
    )
    assert not any(data_dir.iterdir()), "nothing may be read or written"


def test_unknown_command_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "exprot", "task=lipophilicity"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "[oodmol data] unknown command 'exprot'; give one of export, prepare, card, geometry "
        "(see oodmol data --help)\n"
    )


def test_one_featurizer_without_brackets_is_one_name(
    make_csv, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`featurizers=morgan` builds the morgan cache (it was read as six letters)."""
    rows = [f"{'C' * k},{k * 0.5}" for k in range(1, 21)]
    path = make_csv("chains.csv", "smiles,y", rows)
    args = ["task=csv", f"task.path={path}", "task.target_column=y", "progress=false"]
    assert main(["data", "prepare", *args, "featurizers=morgan"]) == 0
    assert "[oodmol] morgan features: 20 molecules in" in capsys.readouterr().out


def test_geometry_command_builds_checks_and_reports(
    make_csv, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`geometry` builds the chosen geometry's 3D cache, checks every molecule and writes
    the report (counts by reason, every molecule a row)."""
    rows = [f"{'C' * k}O,{k * 0.5}" for k in range(1, 21)] + ["C1#CC1,3.0"]  # no conformer
    path = make_csv("alcohols.csv", "smiles,y", rows)
    args = ["task=csv", f"task.path={path}", "task.target_column=y", "progress=false"]
    assert main(["data", "geometry", *args, "threads=1", "conformers=mmff"]) == 0
    out = capsys.readouterr().out
    assert "[oodmol] mmff geometries of csv-alcohols: 20 of 21 pass the checks, 1 fail" in out
    assert "[oodmol]   1 no geometry" in out
    report = json.loads((data_dir / "geometry" / "csv-alcohols-mmff.json").read_text())
    assert report["passed"] == 20 and report["reasons"] == {"no geometry": 1}
    assert report["failed_molecules"]["20"].startswith("no geometry: C1#CC1: ETKDG embedding")
    lines = (data_dir / "geometry" / "csv-alcohols-mmff.csv").read_text().splitlines()
    assert len(lines) == 22 and lines[1] == '0,CO,1,"",,,,,'


def test_representations_are_prepared_as_the_regressors_read_them(
    make_csv, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`representations=[...]` builds the caches of configs/model/representation (ECFP6
    counts: radius 3, counts); an unknown one is named with the choices."""
    path = make_csv("chains.csv", "smiles,y", [f"{'C' * k}O,{k * 0.5}" for k in range(1, 21)])
    args = ["task=csv", f"task.path={path}", "task.target_column=y", "progress=false"]
    assert main(["data", "prepare", *args, "featurizers=[]", "representations=[ecfp6_counts]"]) == 0
    assert "[oodmol] ecfp6_counts features: 20 molecules in" in capsys.readouterr().out
    assert main(["data", "prepare", *args, "representations=[xyzzy]"]) == 2
    assert "there is no representation 'xyzzy'" in capsys.readouterr().err
