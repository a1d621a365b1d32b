"""API keys stay off command lines. A key given as an override would stay in the shell's
history, show in the process list, and go into what a run records of its command line
(Hydra's `.hydra/overrides.yaml`); so such an override is refused before anything reads
it, and the refusal never shows its value. A tool reads its key from an environment
variable, which a setting such as `openai.api_key_env` names: a value there that is no
variable's name is taken for a key typed in its place, and refused the same way."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

from oodmol.errors import UserError

# the last part of a setting's name that means it holds a secret
_SECRET = re.compile(
    r"(api_?key|api_?token|access_?token|auth_?token|hf_?token|secret(_?key)?|passw(or)?d)$",
    re.IGNORECASE,
)
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INSTEAD = (
    "keep it in an environment variable instead: export OPENAI_API_KEY=<key> for oodmol "
    "llm (or the variable openai.api_key_env names)"
)


class SecretOnCommandLine(UserError):
    """An API key, token or password given on the command line."""


def refuse_secrets(overrides: Sequence[str]) -> None:
    """Refuse an override that sets a key, token or password, naming only its key."""
    for override in overrides:
        key, given, _ = override.partition("=")
        key = key.lstrip("+~")
        if given and _SECRET.search(key.rsplit(".", 1)[-1]):
            raise SecretOnCommandLine(
                f"{key}=…: an API key is never taken from the command line, where the "
                "shell's history and the process list keep it (it was neither used nor "
                f"written anywhere); {_INSTEAD}"
            )


def check_key_variable(setting: str, name: str | None) -> None:
    """Refuse a `setting` meant to name the environment variable holding a key (null:
    no key) that holds something else: not a variable's name, or, unset here, a name
    in lower case, which is how keys (`hf_...`) rather than variables look."""
    if not name:
        return
    looks_like_a_key = not _VARIABLE.fullmatch(name) or (
        name not in os.environ and name != name.upper()
    )
    if looks_like_a_key:
        raise SecretOnCommandLine(
            f"{setting}=…: this setting names the environment variable that holds the API "
            "key, and what was given names none (is it the key itself? it was neither used "
            f"nor written anywhere; replace it if others could have seen it); {_INSTEAD}"
        )
