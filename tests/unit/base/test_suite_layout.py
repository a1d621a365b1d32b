"""The suite's own layout: pytest imports test modules by file name (the test folders
are not packages), so a second module of the same name stops the suite at collection."""

from __future__ import annotations

from pathlib import Path


def test_no_two_test_modules_share_a_name() -> None:
    tests = Path(__file__).resolve().parents[2]
    names = sorted(p.name for p in tests.rglob("test_*.py"))
    assert not {n for n in names if names.count(n) > 1}
