"""The suite's own layout: pytest imports test modules by file name (the test folders
are not packages), so a second module of the same name stops the suite at collection;
and a test is `alone` by living in tests/alone, the one folder the suite's own process for
them collects, so a test marked so elsewhere would run in neither process."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]


def test_no_two_test_modules_share_a_name() -> None:
    names = sorted(p.name for p in TESTS.rglob("test_*.py"))
    assert not {n for n in names if names.count(n) > 1}


def test_only_the_alone_folder_holds_alone_tests() -> None:
    marking = {TESTS / "conftest.py", Path(__file__).resolve()}  # the folder's marker, this
    marked = [
        str(p.relative_to(TESTS))
        for p in TESTS.rglob("*.py")
        if p not in marking and "mark.alone" in p.read_text(encoding="utf-8")
    ]
    assert not marked, f"move these tests to tests/alone (which marks them): {marked}"
