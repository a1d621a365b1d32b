"""The run record (`oodmol.run_record`): what a producer writes reads back whole, records written
before the record had a schema still read (and still reach the leaderboard), and every
reader counts an ensemble's member by one rule."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from oodmol.cli import main
from oodmol.report.collect import collect_runs
from oodmol.run_record import SCHEMA, RecordError, RunRecord, iter_runs, read_record

SCHEMA_1 = Path(__file__).with_name("data") / "metrics_schema1.json"


def test_a_record_written_before_schemas_still_reads(tmp_path: Path) -> None:
    """A metrics.json of a train.py run made before records had a schema (kept as it was
    written) reads as a record, and writing it back changes nothing but the schema."""
    record = read_record(SCHEMA_1)
    written = json.loads(SCHEMA_1.read_text())
    assert (record.task, record.split, record.model, record.seed) == (
        written["task"],
        written["split"],
        written["model"],
        written["seed"],
    )
    assert record.metrics["ood"]["rmse"] == written["ood"]["rmse"]
    record.write(tmp_path)
    again = json.loads((tmp_path / "metrics.json").read_text())
    assert again.pop("schema") == SCHEMA
    assert again == written


def test_a_run_recorded_before_schemas_is_on_the_leaderboard(tmp_path: Path) -> None:
    folder = tmp_path / "runs" / "old"
    folder.mkdir(parents=True)
    shutil.copy(SCHEMA_1, folder / "metrics.json")
    runs = collect_runs(tmp_path / "runs").runs
    assert list(runs["model_name"]) == ["mlp"]
    assert runs.loc[0, "ood.rmse"] == json.loads(SCHEMA_1.read_text())["ood"]["rmse"]
    assert main(["report", str(tmp_path / "runs"), "--out", str(tmp_path / "out")]) == 0
    assert "mlp" in (tmp_path / "out" / "runs.csv").read_text()


def test_members_are_counted_by_one_rule(tmp_path: Path) -> None:
    """A record with `uq.member` is a member wherever its folder lies."""
    base = json.loads(SCHEMA_1.read_text())
    for name, member in (("a", None), ("b", 0), ("members/1", None)):
        folder = tmp_path / name
        folder.mkdir(parents=True)
        (folder / "metrics.json").write_text(json.dumps({**base, "uq": {"member": member}}))
    runs = [r.folder.relative_to(tmp_path).as_posix() for r in iter_runs(tmp_path)]
    members = [r.folder.name for r in iter_runs(tmp_path, kind="members")]
    assert runs == ["a", "members/1"] and members == ["b"]


def test_runs_behind_links_are_read_once_and_a_loop_ends(tmp_path: Path) -> None:
    """A leaderboard folder of links to runs kept elsewhere holds those runs; a run that
    two paths reach is read once; a link back up to the folder does not loop."""
    kept = tmp_path / "kept"
    for name in ("a", "b"):
        (kept / name).mkdir(parents=True)
        shutil.copy(SCHEMA_1, kept / name / "metrics.json")
    board = tmp_path / "board"
    board.mkdir()
    (board / "a").symlink_to(kept / "a", target_is_directory=True)
    (board / "a_again").symlink_to(kept / "a", target_is_directory=True)
    (board / "loop").symlink_to(board, target_is_directory=True)
    found = [r.folder.relative_to(board).as_posix() for r in iter_runs(board)]
    assert found == ["a"]
    assert main(["report", str(board), "--out", str(tmp_path / "out")]) == 0
    assert len((tmp_path / "out" / "runs.csv").read_text().strip().splitlines()) == 2


@pytest.mark.parametrize(
    ("change", "phrase"),
    [
        (lambda m: m.pop("task"), "'task' missing"),
        (lambda m: m.update(seed="0"), "'seed' is not a whole number"),
        (lambda m: m.update(status="done"), "'status' is 'done'"),
        (lambda m: m["ood"].update(rmse=-1.0), "'ood.rmse' must be an error ≥ 0"),
        (lambda m: m["id"].update(rmse=math.inf), "'id.rmse' is not finite"),
        (lambda m: m["ood"].update(rmse=None), "'ood.rmse' must be an error ≥ 0"),
        (lambda m: m.pop("ood"), "'ood' missing"),
        (lambda m: m.update(schema=99), "schema 99"),
    ],
)
def test_impossible_records_are_refused_naming_what(tmp_path: Path, change, phrase) -> None:
    content = json.loads(SCHEMA_1.read_text())
    change(content)
    (tmp_path / "metrics.json").write_text(json.dumps(content))
    with pytest.raises(RecordError, match=phrase):
        read_record(tmp_path)
    skipped: list = []
    assert list(iter_runs(tmp_path, skipped=skipped)) == []
    assert len(skipped) == 1 and phrase in skipped[0][1]


def test_a_record_keeps_every_section_a_producer_wrote(tmp_path: Path) -> None:
    record = RunRecord("t", "ood", "m", 3, status="failed").with_sections(
        failure={"kind": "disk_full", "resumable": True}, objective=None
    )
    record.write(tmp_path)
    back = read_record(tmp_path)
    assert back.get("failure") == {"kind": "disk_full", "resumable": True}
    assert back.status == "failed" and not back.complete and back.seed == 3
