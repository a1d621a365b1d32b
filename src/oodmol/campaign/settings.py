"""A campaign's own settings, read from `oodmol campaign` key=value arguments; every other
argument is a train.py override, passed on to every round's run."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from oodmol.campaign.acquisition import DIRECTIONS, RULES
from oodmol.errors import UserError
from oodmol.names import check_name, inside

# what the campaign sets on every run itself, or what would break its rounds
RESERVED = {
    "split": "the campaign sets split=ood_campaign (configure it with split.<setting>)",
    "split.acquired": "the campaign sets the acquired molecules itself",
    "max_molecules": "it would cut the growing training set anew every round; use "
    "split.max_per_set=<n> (at most n molecules per set, drawn once before any acquisition)",
    "hydra.run.dir": "each round runs in <campaign>/rounds/<r>; choose the campaign's folder "
    "with out=<dir>",
    "resume": "the campaign resumes its rounds itself",
    "ckpt_path": "each round trains from scratch",
}


class SettingsError(UserError, ValueError):
    """Arguments a campaign cannot run with; the message says which and why."""


@dataclass(frozen=True)
class CampaignSettings:
    """`acquisition`: greedy (μ), ucb (μ + κσ), ei (expected improvement over the best
    labelled value), random. `rounds` of `batch` molecules each. `direction`: what counts
    as extreme (max: high values, min: low values, both: far from the starting labels'
    median). `top_fraction`: the pool's best share whose recall is reported. `out`: the
    campaign's folder (default below runs/campaigns/)."""

    acquisition: str
    rounds: int
    batch: int
    kappa: float = 2.0
    direction: str = "max"
    top_fraction: float = 0.01
    out: str | None = None

    def __post_init__(self) -> None:
        problems = []
        if self.acquisition not in RULES:
            problems.append(f"acquisition must be one of {RULES}, got {self.acquisition!r}")
        if self.direction not in DIRECTIONS:
            problems.append(f"direction must be one of {DIRECTIONS}, got {self.direction!r}")
        if self.rounds < 1 or self.batch < 1:
            problems.append(f"rounds and batch must be >= 1, got {self.rounds} and {self.batch}")
        if self.kappa < 0:
            problems.append(f"kappa must be >= 0, got {self.kappa}")
        if not 0 < self.top_fraction <= 1:
            problems.append(f"top_fraction must lie in (0, 1], got {self.top_fraction}")
        if problems:
            raise SettingsError("; ".join(problems))

    def identity(self) -> dict:
        """What the campaign's acquisitions and records depend on: all but `rounds` (a
        campaign may be extended) and `out` (where it lies)."""
        return {k: v for k, v in asdict(self).items() if k not in ("rounds", "out")}


REQUIRED = ("acquisition", "rounds", "batch")


def parse_arguments(argv: list[str]) -> tuple[CampaignSettings, list[str]]:
    """The campaign's settings and the train.py overrides among `key=value` arguments."""
    own = {f.name: f.type for f in fields(CampaignSettings)}
    values: dict = {}
    overrides = []
    for argument in argv:
        key, sep, value = argument.partition("=")
        if not sep:
            raise SettingsError(f"arguments are key=value, got {argument!r}")
        if key in own:
            values[key] = _converted(key, value)
        elif key.lstrip("+~") in RESERVED:
            raise SettingsError(
                f"{argument}: not a campaign argument ({RESERVED[key.lstrip('+~')]})"
            )
        else:
            overrides.append(argument)
    missing = [k for k in REQUIRED if k not in values]
    if missing:
        raise SettingsError(f"a campaign needs {', '.join(f'{k}=' for k in missing)}")
    return CampaignSettings(**values), overrides


def _converted(key: str, value: str):
    kinds = {"rounds": int, "batch": int, "kappa": float, "top_fraction": float}
    try:
        return kinds.get(key, str)(value)
    except ValueError:
        kind = "an integer" if kinds[key] is int else "a number"
        raise SettingsError(f"{key}={value}: not {kind}") from None


def campaign_key(settings: CampaignSettings, run_key: str) -> str:
    """Short hash of the campaign's identity and its runs' configuration key."""
    text = json.dumps({"campaign": settings.identity(), "run": run_key}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def default_folder(log_dir: str, task: str, run_name: str, acquisition: str, key: str, seed: int):
    """runs/campaigns/<task>/<model>[+<uq>]/<acquisition>/<key>/<seed>."""
    parts = {"task": task, "model": run_name, "acquisition": acquisition, "key": key}
    names = [check_name(value, f"the campaign's {what}") for what, value in parts.items()]
    return inside(Path(log_dir) / "campaigns", "/".join([*names, str(seed)]), "campaign folder")
