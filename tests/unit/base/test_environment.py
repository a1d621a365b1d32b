"""environment.yaml (conda, for GPU machines) installs what pyproject.toml asks for.

Every dependency of the project and of its `dev` extra must be in environment.yaml,
under its conda name or in the pip section, and where either file constrains its
version some version must satisfy both; likewise for Python itself. Both files are read
as they are, so a dependency added to pyproject.toml alone fails here, by name.
"""

from __future__ import annotations

import re
import sys

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from paths import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest itself depends on tomli before Python 3.11
    import tomli as tomllib

ROOT = REPO
# PyPI name -> conda name, where they differ
CONDA_NAMES = {"torch": "pytorch", "torch-geometric": "pyg", "lmdb": "python-lmdb"}
CONDA_SPEC = re.compile(r"([A-Za-z0-9_.\-]+)\s*(.*)")


def conda_requirement(spec: str) -> tuple[str, SpecifierSet]:
    """A conda match spec ("numpy", "rdkit>=2024.3", "python=3.11") as a normalised name
    and a PEP 440 specifier set; conda's `=X` means any X.* version. Forms conda has
    beyond these (builds, `|`) raise, rather than pass unchecked."""
    match = CONDA_SPEC.fullmatch(spec.strip())
    if match is None:
        raise ValueError(f"unreadable conda spec {spec!r}")
    name, version = match.groups()
    if re.fullmatch(r"=[^=<>!~,]+", version):
        version = f"=={version[1:].removesuffix('.*')}.*"
    try:
        return canonicalize_name(name), SpecifierSet(version)
    except InvalidSpecifier as error:
        raise ValueError(f"conda spec {spec!r} has a version this test cannot read") from error


def compatible(a: SpecifierSet, b: SpecifierSet) -> bool:
    """Whether some version satisfies both: each side allows a union of intervals whose
    ends are the versions named, so trying every named version, a version just above
    each, and one above all of them is enough."""
    named = set()
    for spec in (*a, *b):
        try:
            named.add(Version(spec.version.removesuffix(".*")))
        except InvalidVersion:  # `===<text>`: no version to try
            continue
    candidates = {Version("0"), Version("99999")} | named
    candidates |= {Version(f"{v.base_version}.0.0.1") for v in named}
    return any(
        a.contains(v, prereleases=True) and b.contains(v, prereleases=True) for v in candidates
    )


def environment_packages(environment: dict) -> tuple[dict, dict]:
    """Conda and pip packages of an environment file: name -> (spec text, specifier)."""
    conda, pip = {}, {}
    for entry in environment["dependencies"]:
        if isinstance(entry, dict):
            for line in entry.get("pip", []):
                requirement = Requirement(line)
                pip[canonicalize_name(requirement.name)] = (line, requirement.specifier)
        else:
            name, specifier = conda_requirement(entry)
            conda[name] = (entry, specifier)
    return conda, pip


def out_of_sync(pyproject: dict, environment: dict) -> list[str]:
    """What environment.yaml lacks or pins against pyproject.toml, one line each."""
    project = pyproject["project"]
    wanted = [*project["dependencies"], *project.get("optional-dependencies", {}).get("dev", [])]
    conda, pip = environment_packages(environment)
    problems = []
    python = conda.get("python")
    if python and not compatible(SpecifierSet(project["requires-python"]), python[1]):
        problems.append(
            f"python: environment.yaml's {python[0]!r} is outside pyproject.toml's "
            f"requires-python {project['requires-python']!r}"
        )
    for line in wanted:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        conda_name = CONDA_NAMES.get(name, name)
        found = conda.get(conda_name) or pip.get(name)
        if found is None:
            problems.append(
                f"{name}: missing from environment.yaml (pyproject.toml has {line!r}; add "
                f"{conda_name!r} to its conda dependencies or {name!r} to its pip section)"
            )
        elif not compatible(requirement.specifier, found[1]):
            problems.append(
                f"{name}: environment.yaml's {found[0]!r} admits no version that "
                f"pyproject.toml's {line!r} does"
            )
    return problems


def test_environment_yaml_has_every_dependency_of_pyproject() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    environment = yaml.safe_load((ROOT / "environment.yaml").read_text())
    problems = out_of_sync(pyproject, environment)
    assert not problems, "environment.yaml is out of sync with pyproject.toml:\n" + "\n".join(
        problems
    )


# ------------------------------------------------------------ the check itself


def _pyproject(*dependencies: str, dev: tuple[str, ...] = ()) -> dict:
    return {
        "project": {
            "requires-python": ">=3.10",
            "dependencies": list(dependencies),
            "optional-dependencies": {"dev": list(dev)},
        }
    }


def test_a_missing_dependency_is_named_with_where_it_goes() -> None:
    pyproject = _pyproject("numpy>=1.26", "torch>=2.3", "tokenizers>=0.15", dev=("ruff",))
    environment = {"dependencies": ["python=3.11", "numpy", "pytorch>=2.3", {"pip": []}]}
    problems = out_of_sync(pyproject, environment)
    assert len(problems) == 2
    assert problems[0].startswith("tokenizers: missing from environment.yaml")
    assert "'tokenizers>=0.15'" in problems[0]
    assert problems[1].startswith("ruff: missing")


@pytest.mark.parametrize(
    ("required", "conda", "pip", "in_sync"),
    [
        ("numpy>=1.26", "numpy", None, True),
        ("numpy>=1.26", "numpy=1.26", None, True),
        ("numpy>=1.26", "numpy>=2,<3", None, True),
        ("numpy>=1.26", "numpy<1.26", None, False),
        ("numpy>=1.26", "numpy=1.24", None, False),
        ("numpy>=1.26,<2", "numpy>1.26", None, True),
        ("torch>=2.3", "pytorch==2.1.0", None, False),
        ("qm9pack>=1.0.3", None, "qm9pack==1.0.3", True),
        ("qm9pack>=1.0.3", None, "qm9pack==1.0.2", False),
        ("Hydra_Core>=1.3", None, "hydra-core>=1.3.2", True),
    ],
)
def test_pins_are_checked_on_either_side(
    required: str, conda: str | None, pip: str | None, in_sync: bool
) -> None:
    dependencies: list = ["python=3.11"] + ([conda] if conda else [])
    dependencies.append({"pip": [pip] if pip else []})
    problems = out_of_sync(_pyproject(required), {"dependencies": dependencies})
    assert (problems == []) is in_sync, problems


def test_python_outside_requires_python_is_named() -> None:
    problems = out_of_sync(_pyproject(), {"dependencies": ["python=3.9"]})
    assert problems == [
        "python: environment.yaml's 'python=3.9' is outside pyproject.toml's "
        "requires-python '>=3.10'"
    ]


def test_conda_specs_it_cannot_read_fail_loudly() -> None:
    with pytest.raises(ValueError, match="cannot read"):
        conda_requirement("numpy 1.26 py311_0")
