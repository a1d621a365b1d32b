"""One rule where a string becomes a path.

A name (a task's, a split's, a model's, a data source's, a run's, a campaign's, an
external model's) becomes a folder or file name in the data folder or the runs folder, so
it may come from a file the user received (a checkpoint's stored task, a saved task
folder, a run record). Every name passes `check_name`: one path component of letters,
digits and `_ . + = -`, not starting with a dot, at most 128 characters. Every path
built from names, or from a relative path a config gives, is resolved (links followed)
and must stay inside the folder it belongs to (`inside`). A URL is https or refused.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from oodmol.errors import UserError

NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+=-]{0,127}")


class UnsafeNameError(UserError, ValueError):
    """A name or path that would lead outside the folder it belongs to."""


def check_name(value: object, what: str) -> str:
    """`value` if it is a name (one path component, see the module); else refuse,
    naming `what` (the setting or file it came from)."""
    if not isinstance(value, str) or not NAME.fullmatch(value) or ".." in value:
        shown = repr(value)[:80]
        raise UnsafeNameError(
            f"{what} is {shown}: a name must be 1-128 letters, digits or _ . + = - "
            "(not starting with a dot, no '..'), since it becomes a folder name"
        )
    return value


def safe_stem(text: str) -> str:
    """A name made from free text (a user file's stem): every other character as `_`."""
    stem = re.sub(r"[^A-Za-z0-9_.+=-]", "_", text).lstrip(".").replace("..", "_")
    return stem[:100] or "_"


def inside(root: str | Path, relative: str | Path, what: str) -> Path:
    """`root / relative`, resolved (links followed), refused unless it lies inside
    `root`: `relative` may have several components (a source's `csd10k/file.csv`), never
    an absolute path or `..`."""
    parts = PurePosixPath(str(relative)).parts
    if not parts or PurePosixPath(str(relative)).is_absolute() or ".." in parts:
        raise UnsafeNameError(
            f"{what} is {str(relative)[:120]!r}: a path inside {root} is needed (relative, "
            "without '..')"
        )
    base = Path(root).resolve()
    path = (base / Path(*parts)).resolve()
    if not path.is_relative_to(base):
        raise UnsafeNameError(
            f"{what}: {relative} leads to {path}, outside {base} (a link out of it?)"
        )
    return path


def check_url(url: object, what: str) -> str:
    """`url` if it is an https URL with a host; anything else is refused."""
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme != "https" or not parts.netloc:
        raise UnsafeNameError(f"{what} is {str(url)[:120]!r}: only https URLs are fetched")
    return url
