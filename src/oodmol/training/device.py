"""Where a run ran, as its record states it: the device, its number, the precisions, and
the peak memory of training and of testing."""

from __future__ import annotations

import platform
import resource
import sys

import lightning as L
import torch


def device_facts(trainer: L.Trainer) -> dict:
    """The accelerator and device the run trained on, its precisions, and which of its
    sets it kept on the device (oodmol.data.residency)."""
    root = trainer.strategy.root_device
    if root.type == "cuda":
        name = torch.cuda.get_device_name(root)
    else:
        name = platform.processor() or platform.machine()
    return {
        "accelerator": root.type,
        "name": name,
        "devices": trainer.num_devices,
        "precision": str(trainer.precision),
        "matmul_precision": torch.get_float32_matmul_precision(),
        "data_on_device": _resident_sets(trainer),
    }


def _resident_sets(trainer: L.Trainer) -> list[str]:
    residency = getattr(trainer.datamodule, "residency", None)
    return [] if residency is None else residency.resident


def peak_memory_mb(device: torch.device) -> float:
    """The most memory the run has held: on a GPU what torch allocated on it, on the CPU
    the process's resident peak (so a test's peak includes training's)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10  # bytes on macOS, KB
