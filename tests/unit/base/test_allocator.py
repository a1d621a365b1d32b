"""oodmol.allocator: with freed memory kept, a loop of large allocations stops faulting
fresh pages in from the kernel (each run in its own process: the setting is for life)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from oodmol.identity import EXECUTION_KEYS

pytestmark = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc", reason="a glibc malloc setting (Linux)"
)

LOOP = """
import resource, sys, torch
from oodmol.allocator import keep_freed_memory
applied = keep_freed_memory() if sys.argv[1] == "keep" else False
torch.ones(16)  # torch's own first-use allocations, before counting
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(int(sys.argv[2])):
    x = torch.ones(16 * 2**20)  # 64 MB, over glibc's largest mmap threshold
    del x
print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def page_faults(mode: str, steps: int) -> tuple[str, int]:
    out = subprocess.run(
        [sys.executable, "-c", LOOP, mode, str(steps)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    applied, faults = out.stdout.split()
    return applied, int(faults)


@pytest.mark.slow  # starts a Python process
def test_kept_memory_is_reused_instead_of_faulted_in_again():
    """By default every 64 MB tensor is ~16k fresh pages, step after step; kept, the heap
    grows for the first few steps (how many varies from run to run) and then stops."""
    tensor_pages = 2**14
    applied, kept = page_faults("keep", 80)
    _, default = page_faults("default", 80)
    assert applied == "True"
    assert default > 80 * tensor_pages * 0.9
    assert kept < 12 * tensor_pages


def test_the_setting_is_not_part_of_a_runs_identity():
    assert "keep_freed_memory" in EXECUTION_KEYS
