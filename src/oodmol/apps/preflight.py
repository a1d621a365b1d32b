"""What a job needs of the machine, checked before it starts: a folder it can write its
results to, and the GPU its settings ask for. Without these checks Hydra fails creating
the folder, or Lightning deep inside the run, each with a traceback."""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from oodmol.config import gpu_present
from oodmol.errors import UserError

GPU_ACCELERATORS = ("gpu", "cuda")
# the settings that choose a device: train.py's trainer, `oodmol predict`'s own
ACCELERATOR_KEYS = ("trainer.accelerator", "accelerator")


class UnwritableFolder(UserError, PermissionError):
    """The folder a job would write its results to cannot be written."""


class NoGpu(UserError):
    """The settings ask for a GPU on a machine where torch sees none."""


def check_output_folder(cfg: DictConfig, multirun: bool) -> None:
    """Refuse a run folder (`hydra.run.dir`; a sweep's `hydra.sweep.dir`) that cannot be
    created or written: a read-only disk, a folder without write permission, a file in
    its place. A folder only a running job can name (an interpolation) is left to it."""
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    try:
        named = OmegaConf.select(cfg, key, throw_on_resolution_failure=True)
    except OmegaConfBaseException:
        return
    if not named:
        return
    folder = Path(named).absolute()
    existing = folder
    while not os.path.lexists(existing):
        existing = existing.parent
    if not existing.is_dir():
        problem = f"{existing} is a file, not a folder"
    elif os.access(existing, os.W_OK | os.X_OK):
        return
    elif os.statvfs(existing).f_flag & os.ST_RDONLY:
        problem = f"{existing} is on a read-only file system"
    else:
        problem = f"you have no permission to write to {existing}"
    raise UnwritableFolder(
        f"cannot write the run folder {folder}: {problem}. {_remedy(cfg, key, folder)}"
    )


def _remedy(cfg: DictConfig, key: str, folder: Path) -> str:
    """What to change: the folder itself, or, for a default folder under the project
    root, the PROJECT_ROOT it comes from."""
    give = f"{key}=<a folder you can write>"
    try:
        root = Path(OmegaConf.select(cfg, "paths.root_dir", default=".")).absolute()
    except OmegaConfBaseException:
        return f"Give {give}"
    if not folder.is_relative_to(root):
        return f"Give {give}"
    where = os.environ.get("PROJECT_ROOT")
    source = f"PROJECT_ROOT={where}" if where else f"the current folder {root} (no PROJECT_ROOT)"
    return f"Runs go under {source}: set PROJECT_ROOT to a folder you can write, or give {give}"


def check_gpu(cfg: DictConfig) -> None:
    """Refuse `trainer=gpu` (any accelerator setting naming a GPU) where torch sees no
    GPU, before any data is loaded."""
    for key in ACCELERATOR_KEYS:
        try:
            value = OmegaConf.select(cfg, key, default=None)
        except OmegaConfBaseException:
            continue
        if isinstance(value, str) and value.lower() in GPU_ACCELERATORS and not gpu_present():
            raise NoGpu(
                f"{key}={value} asks for a GPU, and this machine has none that torch can "
                f"use ({_why_no_gpu()}): run it on the CPU with {_cpu_choice(key)}, or on "
                "a machine with one"
            )


def _cpu_choice(key: str) -> str:
    if key == "trainer.accelerator":
        return "trainer=cpu (trainer=auto takes a GPU where there is one)"
    return f"{key}=cpu ({key}=auto takes a GPU where there is one)"


def _why_no_gpu() -> str:
    """Why torch sees no GPU, as far as can be told without a GPU to ask."""
    if os.environ.get("CUDA_VISIBLE_DEVICES") in ("", "-1"):
        return f"CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']!r} hides every GPU"
    if not Path("/dev/nvidiactl").exists():
        return "no NVIDIA driver or device found"
    import torch

    if torch.version.cuda is None:
        return f"this torch {torch.__version__} is built without CUDA"
    return "torch.cuda.is_available() is false"
