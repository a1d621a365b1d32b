"""The project's config tree read as YAML data, never composed or built: the options of a
config group, the groups an option nests, and the nodes that name a `_target_`. What a
stored config may ask for is what this tree offers (`oodmol.stored_config`)."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig

from oodmol.config import config_dir, yaml_document, yaml_documents

TARGET = "_target_"
INTERPOLATION = re.compile(r"\$\{[^{}]*\}")


def tree_folders() -> list[Path]:
    """`configs/` (or OODMOL_CONFIG_DIR) and, inside a Hydra application, every other
    folder of configs it searches (`--config-dir`, `hydra.searchpath`): a model a user
    added there, with its YAML, is the user's own project."""
    folders = {config_dir().resolve()}
    if HydraConfig.initialized():
        for source in HydraConfig.get().runtime.config_sources:
            if source.schema == "file" and Path(source.path).is_dir():
                folders.add(Path(source.path).resolve())
    return sorted(folders)


@functools.cache
def _documents(folder: Path) -> tuple[tuple[Path, Any], ...]:
    found = []
    for path in sorted(folder.rglob("*.yaml")):
        found.extend((path, document) for document in yaml_documents(path))
    return tuple(found)


def documents() -> Iterator[tuple[Path, Any]]:
    for folder in tree_folders():
        yield from _documents(folder)


def declared_targets(node: Any) -> Iterator[Mapping]:
    """Every mapping below `node` (itself included) that names a `_target_`."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            if isinstance(item.get(TARGET), str):
                yield item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def buildable_targets() -> frozenset[str]:
    """Every `_target_` the tree names: what the project itself builds."""
    return frozenset(
        node[TARGET] for _, document in documents() for node in declared_targets(document)
    )


def target_node(target: str) -> Mapping | None:
    """The first node of the tree that builds `target`: its settings are those a stored
    node with that target may hold."""
    for _, document in documents():
        for node in declared_targets(document):
            if node[TARGET] == target:
                return node
    return None


def options(group: str) -> dict[str, Mapping]:
    """The options of a config group (`task`, `model/representation`) by name, each
    with its YAML's settings for the group's node (a `@package _global_` file's node
    under the group's key)."""
    found: dict[str, Mapping] = {}
    for folder in tree_folders():
        for path in sorted((folder / group).glob("*.yaml")):
            document = yaml_document(path)
            node = document.get(group.rpartition("/")[2], document)
            found.setdefault(path.stem, node if isinstance(node, Mapping) else document)
    return found


def nested_groups(group: str, option: str) -> list[str]:
    """The groups an option of `group` chooses in its defaults list whose folder lies
    under the group's (`model/krr_rbf` → `representation`)."""
    nested = []
    for folder in tree_folders():
        path = folder / group / f"{option}.yaml"
        if not path.is_file():
            continue
        document = yaml_document(path)
        for entry in document.get("defaults") or []:
            if isinstance(entry, Mapping):
                for key in entry:
                    if (folder / group / str(key)).is_dir():
                        nested.append(str(key))
    return nested


def name_pattern(template: object) -> re.Pattern | None:
    """A regular expression of the names an option's `name:` template gives
    (`${model.representation.name}-krr_rbf` → `(.+)-krr_rbf`)."""
    if not isinstance(template, str) or "${" not in template:
        return None
    parts = INTERPOLATION.split(template)
    return re.compile("(.+)".join(re.escape(part) for part in parts))
