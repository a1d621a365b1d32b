"""The layers of `src/oodmol` read top-down, and stay so: a module imports only from its
own package or from a lower layer (the base modules from each other too), nothing
reaches upwards even through other modules, and no modules import each other in a circle.

| layer | packages | what |
|---|---|---|
| cli | `oodmol.cli` | the `oodmol` command and its tools |
| apps | `oodmol.apps` | the Hydra applications, the work of llm, pretrain, reproduce |
| analyses | benchmark, campaign, ablation, report | what turns runs into answers |
| inference | `oodmol.inference` | a trained model read, predicting, re-scoring |
| training | `oodmol.training` | a run's life, ensembles' members, sweeps |
| scoring | `oodmol.scoring` | predictions into a run's record and files |
| models | `oodmol.models` | the LightningModule and every backbone |
| maths | uq, metrics, pretraining, llm | uncertainty, regression metrics, objectives, prompts |
| data | `oodmol.data` | sources, validation, splits, featurisers, caches |
| base | the modules `oodmol.*` | run_record, errors, overrides, identity, config, io, locks |
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest
from paths import REPO

SRC = REPO / "src"
LAYERS = (  # bottom to top
    ("base", ("oodmol",)),
    ("data", ("oodmol.data",)),
    ("maths", ("oodmol.uq", "oodmol.metrics", "oodmol.pretraining", "oodmol.llm")),
    ("models", ("oodmol.models",)),
    ("scoring", ("oodmol.scoring",)),
    ("training", ("oodmol.training",)),
    ("inference", ("oodmol.inference",)),
    ("analyses", ("oodmol.benchmark", "oodmol.campaign", "oodmol.ablation", "oodmol.report")),
    ("apps", ("oodmol.apps",)),
    ("cli", ("oodmol.cli",)),
)


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


@cache
def modules() -> dict[str, Path]:
    """Every module of src/oodmol by its dotted name (a package by its __init__)."""
    found = {}
    for path in sorted((SRC / "oodmol").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def module_named(name: str) -> str | None:
    """The module an imported name is (or is in): `oodmol.a.b.func` -> `oodmol.a.b`."""
    while name and name not in modules():
        name = name.rpartition(".")[0]
    return name or None


def package(module: str) -> str:
    """The package a module belongs to for layering: `oodmol.<package>` for a module
    inside one, the base for the modules at the top."""
    parts = module.split(".")
    if len(parts) == 1:
        return module
    if (SRC / "oodmol" / parts[1]).is_dir():
        return ".".join(parts[:2])
    return "oodmol"


def layer(module: str) -> int:
    owner = package(module)
    for index, (_, packages) in enumerate(LAYERS):
        if owner in packages:
            return index
    raise AssertionError(f"{owner} is in no layer: add it to LAYERS (and the docstring)")


@cache
def graph() -> dict[str, set[str]]:
    """Module -> the oodmol modules it imports."""
    edges = {}
    for name, path in modules().items():
        imported = imported_modules(path.read_text(), name)
        edges[name] = {
            target
            for target in map(module_named, (i for i in imported if within(i, "oodmol")))
            if target is not None and target != name
        }
    return edges


def test_every_package_has_a_layer() -> None:
    for module in modules():
        layer(module)


def test_imports_go_down_or_stay_in_the_package() -> None:
    wrong = []
    for module, targets in graph().items():
        for target in targets:
            same_package = package(target) == package(module)
            below = layer(target) < layer(module)
            if not (same_package or below):
                wrong.append(
                    f"{module} ({LAYERS[layer(module)][0]}) imports {target} "
                    f"({LAYERS[layer(target)][0]})"
                )
    assert not wrong, "imports that go up or sideways:\n" + "\n".join(sorted(wrong))


def test_nothing_reaches_upwards_through_other_modules() -> None:
    """What a module reaches through any chain of imports lies at or below its layer."""
    edges = graph()
    for start in edges:
        seen, stack = set(), [start]
        while stack:
            for target in edges[stack.pop()] - seen:
                seen.add(target)
                stack.append(target)
        above = sorted(t for t in seen if layer(t) > layer(start))
        assert not above, f"{start} reaches {above}"


def test_no_modules_import_each_other_in_a_circle() -> None:
    edges = graph()
    index, low, on_stack, stack, circles = {}, {}, set(), [], []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in edges:
        if node not in index:
            visit(node)
    assert not circles, f"modules that import each other: {circles}"


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        ("oodmol.run_record", "base"),
        ("oodmol.cli", "cli"),
        ("oodmol.cli.data", "cli"),
        ("oodmol.apps.train", "apps"),
        ("oodmol.scoring.results", "scoring"),
    ],
)
def test_layers_of_known_modules(module: str, expected: str) -> None:
    assert LAYERS[layer(module)][0] == expected


def test_every_kind_of_import_is_seen() -> None:
    source = """
from typing import TYPE_CHECKING
import oodmol.uq.metrics as metrics
from oodmol import uq
from ..uq import plots
if TYPE_CHECKING:
    from oodmol.uq.evaluation import UncertaintyReport
def late():
    from . import values
    import oodmol.training.ensembles
"""
    names = imported_modules(source, "oodmol.scoring.results")
    assert {
        "oodmol.uq.metrics",
        "oodmol.uq",
        "oodmol.uq.plots",
        "oodmol.uq.evaluation",
        "oodmol.scoring.values",
        "oodmol.training.ensembles",
    } <= names
    assert not within("oodmol.uqx", "oodmol.uq")
