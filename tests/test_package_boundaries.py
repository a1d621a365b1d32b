"""`oodmol.eval` (regression metrics, parity plot, external predictions) and `oodmol.uq`
(uncertainty methods and their assessment) never import each other, in either direction;
what needs both (writing a run's result files) lives above them, in `oodmol.scoring.results`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGES = ("oodmol.eval", "oodmol.uq")


def imported_modules(source: str, module: str) -> set[str]:
    """Every module an `import` statement anywhere in `source` names (module level, in
    functions, under `if TYPE_CHECKING:`), relative imports resolved against `module`;
    `from a import b` counts as importing both `a` and `a.b` (b may be a submodule)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = module.split(".")[: -node.level]
                base = ".".join([*parent, *([base] if base else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def modules_of(package: str) -> list[tuple[str, Path]]:
    folder = SRC.joinpath(*package.split("."))
    return [
        (f"{package}.{p.stem}" if p.stem != "__init__" else package, p)
        for p in sorted(folder.glob("*.py"))
    ]


@pytest.mark.parametrize("package, other", [PACKAGES, PACKAGES[::-1]])
def test_package_does_not_import_the_other(package: str, other: str) -> None:
    modules = modules_of(package)
    assert modules, f"no modules found for {package}"
    offending = {
        module: sorted(
            name for name in imported_modules(path.read_text(), module) if within(name, other)
        )
        for module, path in modules
    }
    assert not {m: names for m, names in offending.items() if names}, f"{package} imports {other}"


def test_every_kind_of_import_is_seen() -> None:
    source = """
from typing import TYPE_CHECKING
import oodmol.uq.metrics as metrics
from oodmol import uq
from ..uq import plots
if TYPE_CHECKING:
    from oodmol.uq.evaluation import UncertaintyReport
def late():
    from . import callbacks
    import oodmol.training.ensembles
"""
    names = imported_modules(source, "oodmol.eval.results")
    assert {
        "oodmol.uq.metrics",
        "oodmol.uq",
        "oodmol.uq.plots",
        "oodmol.uq.evaluation",
        "oodmol.training.test_evaluation",
        "oodmol.training.ensembles",
    } <= names
    assert not within("oodmol.uqx", "oodmol.uq")
