"""The memory a block of work takes, as the machine sees it (`oodmol.training.memory_meter`):
on the CPU every allocation counts, a tensor's or not, and what the process held before
the block does not."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch

from oodmol.training.memory_meter import (
    MB,
    available_bytes,
    can_measure,
    collecting_only_new_objects,
    measured,
)

CPU = torch.device("cpu")
pytestmark = pytest.mark.skipif(not can_measure(CPU), reason="needs Linux's /proc/self")


def test_a_tensor_made_and_freed_in_the_block_counts_at_its_size() -> None:
    with measured(CPU) as peak:
        block = torch.ones(64 * MB // 4)  # 64 MB, written: resident
        del block
    assert 60 * MB < peak() < 72 * MB


def test_memory_that_is_not_a_tensor_counts_too() -> None:
    """What a kernel allocates for itself is no tensor an operation returns: the count
    of returned tensors missed it, the machine's count does not."""
    with measured(CPU) as peak:
        scratch = np.ones(32 * MB // 8)
        del scratch
    assert 28 * MB < peak() < 40 * MB


def test_memory_held_before_the_block_is_not_the_blocks() -> None:
    held = torch.ones(64 * MB // 4)
    with measured(CPU) as peak:
        held.mul_(2)  # in place: no new memory
    assert peak() < 8 * MB
    del held


def test_a_limit_replaces_what_the_machine_has() -> None:
    assert available_bytes(CPU, limit_mb=300) == 300 * MB
    assert available_bytes(CPU) > 0


def test_a_block_of_measurements_collects_only_what_it_made() -> None:
    """The collection before each measurement walks the objects made in the block (a
    walk of everything a process that imported the models holds took 0.3 s); what was
    there before is walked again once the block ends, however it ends."""
    before = [[]]  # containers: objects the collector tracks
    with collecting_only_new_objects():
        made = [[]]
        walked = gc.get_objects()
        assert any(o is made for o in walked) and not any(o is before for o in walked)
    assert any(o is before for o in gc.get_objects())
    with pytest.raises(RuntimeError), collecting_only_new_objects():
        raise RuntimeError("a probe failed")
    assert gc.get_freeze_count() == 0
