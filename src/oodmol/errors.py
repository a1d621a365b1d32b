"""What the user meets when something goes wrong: one message, never a traceback.

Every entry point (`train.py`, `evaluate.py`, each `oodmol` command) runs through
`door`, which turns an `OodmolError` into its message on stderr and an exit status:
2 for input the user can fix (`UserError`), 1 for a run that started and failed
(`RunFailure`). Any other exception is a bug and keeps its traceback. The code that finds
a problem raises one of these with a message that says what is wrong, where (file, line,
key) and how to fix it; no call site catches and prints on its own.

`--debug` on the command line, `OODMOL_DEBUG=1` or Hydra's `HYDRA_FULL_ERROR=1` show the
traceback of a user error too.
"""

from __future__ import annotations

import errno
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import ClassVar, NoReturn

DEBUG_FLAG = "--debug"
DEBUG_VARIABLES = ("OODMOL_DEBUG", "HYDRA_FULL_ERROR")
USER_ERROR = 2
RUN_FAILED = 1
STOPPED_BY_SIGNAL = 128  # and up: 128 + the signal, as a shell reports it
INTERRUPTED = STOPPED_BY_SIGNAL + 2  # SIGINT
_FIXABLE_BY_USER = {
    errno.ENOENT,
    errno.ENOTDIR,
    errno.EISDIR,
    errno.EACCES,
    errno.EPERM,
    errno.EROFS,
    errno.ENAMETOOLONG,
    errno.EEXIST,
}
_FAILED_RUN = {errno.ENOSPC, errno.EDQUOT, errno.EIO}
_FULL_KEY = "full_key: "  # the line of Hydra's InstantiationException naming the config key
_SETTING = re.compile(r"[A-Za-z_]\w*=")  # a message that starts with its setting, `name=...`


class OodmolError(Exception):
    """An error whose message is all the user needs: shown as one message, no traceback."""

    exit_code: ClassVar[int] = RUN_FAILED


class UserError(OodmolError):
    """Input the user can fix (a file, an override, a checkpoint): exit status 2."""

    exit_code = USER_ERROR


class InputError(UserError, ValueError):
    """A file or folder the user gave that does not hold what the command needs."""


class MissingFileError(UserError, FileNotFoundError):
    """A file the user named that is not there."""


class UsageError(UserError):
    """A command line the tool cannot run: a missing or unknown argument."""


class RunFailure(OodmolError):
    """A run that started and could not finish (its record says why): exit status 1."""

    exit_code = RUN_FAILED


def _environment_error(error: OSError) -> int | None:
    """The exit status of an operating-system error about a file the user named or the
    disk a command writes to (a path that is not there or not a folder, no permission, a
    full disk); None for any other, which is a bug and keeps its traceback."""
    if not error.filename:
        return None
    if error.errno in _FIXABLE_BY_USER:
        return USER_ERROR
    if error.errno in _FAILED_RUN:
        return RUN_FAILED
    return None


def debugging(argv: Sequence[str] = ()) -> bool:
    """Whether the user asked for tracebacks."""
    return DEBUG_FLAG in argv or any(os.environ.get(v) == "1" for v in DEBUG_VARIABLES)


def without_debug_flag(argv: Sequence[str]) -> list[str]:
    """The arguments without `--debug`, which turns tracebacks on (and into the
    environment, so child processes and Hydra see it too)."""
    if DEBUG_FLAG in argv:
        os.environ["OODMOL_DEBUG"] = "1"
    return [a for a in argv if a != DEBUG_FLAG]


def message_of(program: str, error: BaseException) -> str:
    """The text a user error is shown as: the program's name, then the message."""
    text = str(error).strip() or type(error).__name__
    return text if text.startswith("[") else f"[{program}] {text}"


def door(program: str, run: Callable[[], int | None], argv: Sequence[str] = ()) -> int:
    """Run an entry point's work; its exit status. User errors and failed runs end as
    their message on stderr (the traceback only when debugging), Ctrl-C as one line."""
    try:
        with user_errors(program, argv):
            return run() or 0
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)


@contextmanager
def user_errors(
    program: str,
    argv: Sequence[str] = (),
    *,
    raise_as: Callable[[str], Exception] | None = None,
    show: bool = True,
) -> Iterator[None]:
    """Inside it, an `OodmolError` (or Ctrl-C) ends the process with its message and
    exit status, through `SystemExit`, unless the user asked for tracebacks; so does a
    user error that a constructor of the config raised, which Hydra's `instantiate`
    wraps. `raise_as` raises that exception with the message instead (a sweep's job,
    whose sweep goes on); `show=False` keeps a process quiet that is not the one the
    user reads (a DDP rank)."""
    try:
        yield
    except OodmolError as error:
        if debugging(argv):
            raise
        _refuse(message_of(program, error), error.exit_code, raise_as, show)
    except OSError as error:
        code = _environment_error(error)
        if code is None or debugging(argv):
            raise
        if show:
            print(f"[{program}] {error.filename}: {error.strerror}", file=sys.stderr, flush=True)
        if raise_as is not None:
            raise raise_as(f"{error.filename}: {error.strerror}") from None
        raise SystemExit(code) from None
    except Exception as error:
        cause = _refused_by_a_constructor(error)
        if cause is None or debugging(argv):
            raise
        _refuse(f"[{program}] {_built_by(error, cause)}", cause.exit_code, raise_as, show)
    except KeyboardInterrupt:
        if debugging(argv):
            raise
        if show:
            print(f"[{program}] interrupted", file=sys.stderr, flush=True)
        raise SystemExit(INTERRUPTED) from None


def _refuse(
    message: str, code: int, raise_as: Callable[[str], Exception] | None, show: bool
) -> NoReturn:
    if show:
        print(message, file=sys.stderr, flush=True)
    if raise_as is not None and code < STOPPED_BY_SIGNAL:
        raise raise_as(message) from None  # a stop signal ends a sweep too
    raise SystemExit(code) from None


def user_error_behind(error: BaseException) -> OodmolError | None:
    """The user error behind a library's own (a resolver's in OmegaConf's, a
    constructor's in Hydra's `instantiate`), which keeps it as its cause or context."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, OodmolError):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def _refused_by_a_constructor(error: Exception) -> OodmolError | None:
    """The user error behind Hydra's `InstantiationException`, if `error` is one (Hydra
    is looked up, not imported: a process that never imported it raised none)."""
    hydra_errors = sys.modules.get("hydra.errors")
    if hydra_errors is None or not isinstance(error, hydra_errors.InstantiationException):
        return None
    return user_error_behind(error)


def _built_by(error: Exception, cause: OodmolError) -> str:
    """The message of a user error a constructor raised, under the config key it was
    built from: `alphas=[]: ...` of `model.module` reads `model.module.alphas=[]: ...`."""
    text = str(cause).strip()
    lines = str(error).splitlines()
    key = next((x.removeprefix(_FULL_KEY) for x in lines if x.startswith(_FULL_KEY)), None)
    if key is None:
        return text
    return f"{key}.{text}" if _SETTING.match(text) else f"{key}: {text}"
