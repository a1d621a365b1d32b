"""BOOM's prompt (appendix E), and few-shot examples drawn from the training split."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from oodmol.errors import InputError

INSTRUCTION = "Only return a floating point number with 4 digits after the decimal point."
Message = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": ...}


@dataclass(frozen=True)
class PromptSpec:
    """What the prompt calls the property; from the task config (`llm.yaml` interpolates
    `task.property`, `task.description` and `task.units`; each can be overridden)."""

    property: str
    description: str
    units: str

    def __post_init__(self) -> None:
        for name in ("property", "units"):
            if not str(getattr(self, name)).strip():
                raise InputError(
                    f"the prompt needs the property's {name}, and the task gives none: "
                    f"set prompt.{name}=... (e.g. task=csv task.units=logS)"
                )

    def question(self, smiles: str) -> str:
        """BOOM's prompt for one molecule, word for word."""
        description = self.description.strip().rstrip(".")
        about = f"{self.property} ({description})" if description else self.property
        return f"{INSTRUCTION} For SMILES: {smiles} predict the {about} in {self.units} value:"


def answer_text(value: float) -> str:
    """A training value written as the prompt asks answers to be written."""
    return f"{value:.4f}"


@dataclass(frozen=True)
class FewShot:
    """`k` training molecules shown before each question, with their true values as
    answers; drawn per molecule from (seed, mol_id) alone, so a resumed or reordered run
    shows each molecule the same examples. Only training molecules are ever shown."""

    smiles: np.ndarray
    values: np.ndarray
    k: int
    seed: int

    def __post_init__(self) -> None:
        if self.k < 0 or self.k > len(self.smiles):
            raise InputError(
                f"few-shot k={self.k} must be between 0 and the {len(self.smiles)} training "
                "molecules"
            )

    def examples(self, mol_id: int) -> list[tuple[str, float]]:
        rng = np.random.default_rng([self.seed, int(mol_id)])
        rows = rng.choice(len(self.smiles), size=self.k, replace=False)
        return [(str(self.smiles[r]), float(self.values[r])) for r in rows]


def conversation(spec: PromptSpec, smiles: str, examples: list[tuple[str, float]]) -> list[Message]:
    """The chat a model answers: each example as a question and its answer, then the
    molecule's question."""
    messages: list[Message] = []
    for example, value in examples:
        messages.append({"role": "user", "content": spec.question(example)})
        messages.append({"role": "assistant", "content": answer_text(value)})
    messages.append({"role": "user", "content": spec.question(smiles)})
    return messages


def plain_text(messages: list[Message]) -> str:
    """The chat as one text for a model without a chat template: each question followed
    by its answer on the same line, the last question left open."""
    parts = []
    for message in messages:
        if message["role"] == "user":
            parts.append(("\n" if parts else "") + message["content"])
        else:
            parts.append(" " + message["content"])
    return "".join(parts)
