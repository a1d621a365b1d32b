"""Which results can be compared with which. A run on a subset of the molecules, one that
left molecules out, one trained on a shortened budget, and external predictions (all the
more when they cover only part of a test set) are flagged in metrics.json; the
leaderboard shows flagged runs beside full ones and never lets them stand in for one."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

SUBSET = "subset"  # max_molecules kept fewer molecules than a set has
LEFT_OUT = "left_out"  # molecules without features (e.g. no conformer) were left out
SHORTENED = "shortened"  # a shorter training than the model's budget (debug, overrides)
EXTERNAL = "external"  # predictions made outside oodmol (evaluate.py predictions=...)
PARTIAL = "partial"  # external predictions that miss molecules of a test set
OTHER_TASK = "other_task"  # a checkpoint scored on another task or split than it trained on
ORDER = (SUBSET, LEFT_OUT, SHORTENED, EXTERNAL, PARTIAL, OTHER_TASK)
MEANINGS = {
    SUBSET: "trained and tested on a subset (max_molecules)",
    LEFT_OUT: "molecules without features were left out",
    SHORTENED: "trained for less than the model's budget (debug, epoch overrides)",
    EXTERNAL: "predictions made outside oodmol",
    PARTIAL: "external predictions that miss test molecules",
    OTHER_TASK: "a model scored on another task or split than it was trained on",
}

# settings that shorten a training when given on the command line; an experiment config
# that sets them defines its own protocol instead
BUDGET_SETTINGS = (
    "model.max_epochs",
    "trainer.max_epochs",
    "trainer.max_steps",
    "trainer.max_time",
    "trainer.limit_train_batches",
)


def data_flags(facts: Mapping) -> list[str]:
    """From a run's data facts (`data` in metrics.json): sets cut by `max_molecules`,
    molecules left out for want of features."""
    flags = []
    sizes, used = facts.get("sizes") or {}, facts.get("sizes_used") or {}
    left_out = {k: v for k, v in (facts.get("left_out") or {}).items() if k != "examples"}
    expected = {name: sizes.get(name, 0) - left_out.get(name, 0) for name in used}
    if used.get("val") == 0 and used.get("train", 0) >= expected.get("train", 0) + expected.get(
        "val", 0
    ):  # no hold-out (protocol=boom): the validation molecules trained, none were cut
        expected = {**expected, "train": expected["train"] + expected["val"], "val": 0}
    if any(used[name] < expected[name] for name in used):
        flags.append(SUBSET)
    if any(left_out.values()):
        flags.append(LEFT_OUT)
    return flags


def budget_overrides(overrides: Iterable[str]) -> list[str]:
    """The command-line overrides (Hydra's `key=value`, `+key=value`, `++key=value`) that
    change the training budget."""
    return [o for o in overrides if o.lstrip("+~").split("=", 1)[0] in BUDGET_SETTINGS]


def coverage_flags(coverage: Mapping) -> list[str]:
    """External predictions, and whether they miss any ID or OOD molecule."""
    missing = sum((coverage.get(f"missing_{name}") or {}).get("count", 0) for name in ("id", "ood"))
    return [EXTERNAL, PARTIAL] if missing else [EXTERNAL]


def ordered(flags: Iterable[str]) -> list[str]:
    """Flags without repeats, in one fixed order (so equal sets compare equal)."""
    present = set(flags)
    return [f for f in ORDER if f in present] + sorted(present - set(ORDER))
