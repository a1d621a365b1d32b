"""The answers of one evaluation, kept on disk as they come, so that a killed run loses
nothing and a rerun asks only the molecules still unanswered.

A JSON-lines file: a first line with the settings the answers were made with, then one
line per answered molecule (`mol_id`, `set`, `smiles`, the raw `answer`, and its parsed
`value`, null when the answer holds no number). A line cut short by a kill is dropped
when the file is opened again."""

from __future__ import annotations

import json
import os
from pathlib import Path

from oodmol.errors import UserError


class AnswerLogError(UserError, ValueError):
    """The answers file belongs to another evaluation, or is damaged."""


class AnswerLog:
    def __init__(self, path: Path, settings: dict) -> None:
        self.path = path
        self.settings = json.loads(json.dumps(settings))  # as it reads back from the file
        self.records: dict[int, dict] = {}
        if path.exists() and path.stat().st_size:
            self._read()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"settings": self.settings}) + "\n")

    def _read(self) -> None:
        data = self.path.read_bytes()
        complete = data[: data.rfind(b"\n") + 1]
        if len(complete) < len(data):  # the last line was being written when a run died
            with self.path.open("r+b") as file:
                file.truncate(len(complete))
        lines = complete.decode().splitlines()
        try:
            header = json.loads(lines[0])["settings"]
        except (IndexError, KeyError, TypeError, json.JSONDecodeError):
            raise AnswerLogError(
                f"{self.path} does not start with an oodmol llm settings line; "
                "choose another out= or remove it"
            ) from None
        if header != self.settings:
            differ = sorted(
                k for k in {*header, *self.settings} if header.get(k) != self.settings.get(k)
            )
            shown = "; ".join(
                f"{k}: {header.get(k)!r} there, {self.settings.get(k)!r} now" for k in differ
            )
            raise AnswerLogError(
                f"{self.path} holds answers made with other settings ({shown}); "
                "choose another out= to keep both, or remove it to start again"
            )
        for number, line in enumerate(lines[1:], start=2):
            try:
                record = json.loads(line)
                self.records[int(record["mol_id"])] = record
            except (KeyError, TypeError, ValueError, json.JSONDecodeError):
                raise AnswerLogError(
                    f"{self.path}, line {number} is damaged: {line[:200]!r}"
                ) from None

    def append(self, records: list[dict]) -> None:
        """Write `records` to the end of the file and to disk before anything else happens."""
        if not records:
            return
        with self.path.open("a") as file:
            file.write("".join(json.dumps(r) + "\n" for r in records))
            file.flush()
            os.fsync(file.fileno())
        self.records.update((int(r["mol_id"]), r) for r in records)
