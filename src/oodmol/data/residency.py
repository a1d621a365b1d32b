"""Data kept on the device: a set whose tensors fit is moved to the accelerator once, and
each batch is gathered there by index, instead of being collated on the host and copied
over at every step. Small models on a GPU wait on those copies more than they compute.

`data_on_device` (train.py's setting of that name):
- `auto`: on a CUDA device, every set that takes at most `RESIDENT_SHARE` of the device's
  free memory when the run starts its loaders; on the host otherwise;
- `true`: every set that can be gathered on the device, whatever its size;
- `false`: batches are built on the host (and pinned on CUDA), as with worker processes.

On the CPU the data is where the model is already, so nothing moves. The batches are the
same tensors either way (tests/unit/data/test_residency.py, and on a GPU
tests/e2e/test_gpu_path.py)."""

from __future__ import annotations

import logging

import torch

from oodmol.data.features import BatchedDataset
from oodmol.errors import InputError

log = logging.getLogger(__name__)
RESIDENT_SHARE = 0.25  # of the device's free memory, so that training keeps the rest


def checked_data_on_device(value: object) -> str | bool:
    """`auto`, true or false, refused in one line before any data is loaded."""
    if isinstance(value, bool) or value == "auto":
        return value
    raise InputError(
        f"data_on_device must be auto, true or false (keep the data on the GPU and gather "
        f"its batches there); got {value!r}"
    )


class DeviceResidency:
    """Which sets of a run live on its device, moved once and kept for every epoch."""

    def __init__(self, setting: object = "auto") -> None:
        self.setting = checked_data_on_device(setting)
        self.sets: dict[str, tuple[BatchedDataset, BatchedDataset]] = {}  # host's, device's

    @property
    def resident(self) -> list[str]:
        """The names of the sets on the device, for the run's record."""
        return sorted(self.sets)

    def dataset(self, name: str, dataset: BatchedDataset, device: torch.device | None):
        """The set `name` as its loader reads it: its copy on `device`, or itself."""
        if name in self.sets and self.sets[name][0] is dataset:
            return self.sets[name][1]
        self.sets.pop(name, None)
        if device is None or device.type == "cpu" or self.setting is False:
            return dataset
        if self.setting == "auto" and not _fits(dataset, device):
            return dataset
        moved = dataset.on_device(device)
        if moved is None:
            kind = type(dataset).__name__
            log.info("the %s set stays on the host: %s batches are built there", name, kind)
            return dataset
        self.sets[name] = (dataset, moved)
        return moved

    def holds(self, dataset: object) -> bool:
        """Whether `dataset` is a set this run keeps on its device."""
        return any(dataset is moved for _, moved in self.sets.values())


def _fits(dataset: BatchedDataset, device: torch.device) -> bool:
    """Whether the set may stay on `device` by itself: CUDA, within its share."""
    if device.type != "cuda":
        return False
    free, _ = torch.cuda.mem_get_info(device)
    return 0 < dataset.nbytes() <= RESIDENT_SHARE * free
