"""The seed of each ensemble member, and back: member k of a run with seed s uses
s + MEMBER_SEED_STRIDE · k everywhere the run's seed is used (torch, the forest, the
bootstrap resample). Member 0 is thus the single model with seed s, and members of runs
with seeds below the stride never coincide."""

from __future__ import annotations

MEMBER_SEED_STRIDE = 1000


def member_seed(run_seed: int, member: int) -> int:
    return run_seed + MEMBER_SEED_STRIDE * member


def run_seed(member_seed: int, member: int) -> int:
    return member_seed - MEMBER_SEED_STRIDE * member
