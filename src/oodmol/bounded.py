"""Bounded reading: a file the user may have received (a checkpoint, a run record, a saved
task, a split file, a predictions file) is refused, in one line, when it is larger or
more deeply nested than anything oodmol writes, before it is parsed whole.

Sizes are checked on disk before reading; JSON's own parser stops at Python's recursion
limit, which becomes the same refusal; a structure already read is walked without
recursion (`check_shape`), so no reader after it recurses into something unbounded.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from oodmol.errors import InputError

MB = 1 << 20
# the most a file of each kind oodmol writes holds, with room to spare: a QM9 run's
# record or split file is a few MB, a stored config a few hundred settings
MAX_JSON_BYTES = 256 * MB
MAX_DEPTH = 64
MAX_NODES = 5_000_000
MAX_STRING = 1 * MB


class OversizedInputError(InputError):
    """A file larger or deeper than any oodmol writes: refused before it is used."""


def check_size(path: Path, limit: int, what: str) -> None:
    """Refuse `path` when it holds more than `limit` bytes."""
    size = Path(path).stat().st_size
    if size > limit:
        raise OversizedInputError(
            f"{path}: {size / MB:.1f} MB, more than any {what} oodmol writes "
            f"({limit / MB:.0f} MB); not read"
        )


def read_json(path: str | Path, what: str, limit: int = MAX_JSON_BYTES) -> Any:
    """The JSON in `path`, after checking its size, its nesting and its node count."""
    path = Path(path)
    check_size(path, limit, what)
    text = path.read_text(encoding="utf-8")
    try:
        content = json.loads(text)
    except RecursionError:
        raise OversizedInputError(
            f"{path}: nested deeper than any {what} oodmol writes; not read"
        ) from None
    check_shape(content, str(path), what)
    return content


def check_shape(
    content: Any,
    where: str,
    what: str,
    max_depth: int = MAX_DEPTH,
    max_nodes: int = MAX_NODES,
    max_string: int = MAX_STRING,
) -> None:
    """Refuse a structure of mappings and sequences deeper than `max_depth`, with more
    than `max_nodes` values, or with a string longer than `max_string`: walked with a
    stack of its own, so a planted depth cannot exhaust Python's."""
    stack: list[tuple[Any, int]] = [(content, 0)]
    nodes = 0
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if nodes > max_nodes:
            raise OversizedInputError(
                f"{where}: more than {max_nodes:,} values, more than any {what} oodmol "
                "writes; not used"
            )
        if depth > max_depth:
            raise OversizedInputError(
                f"{where}: nested more than {max_depth} levels deep, deeper than any {what} "
                "oodmol writes; not used"
            )
        if isinstance(node, Mapping):
            stack.extend((key, depth + 1) for key in node)
            stack.extend((value, depth + 1) for value in node.values())
        elif isinstance(node, list | tuple):
            stack.extend((value, depth + 1) for value in node)
        elif isinstance(node, str | bytes) and len(node) > max_string:
            raise OversizedInputError(
                f"{where}: a text of {len(node):,} characters, longer than any in a {what} "
                "oodmol writes; not used"
            )
