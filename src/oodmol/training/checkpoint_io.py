"""Checkpoints written so that a failed write never costs the last good one.

Lightning's own `TorchCheckpointIO` opens the target through fsspec: the file is truncated
and written in place (or written to a temporary file elsewhere and copied over it), so a
full disk or an exhausted quota in the middle of the write left a truncated `last.ckpt`
where a good one had been, and the run could not resume. `AtomicCheckpointIO` writes every
checkpoint the way `oodmol.io` writes results: a temporary file in the checkpoint's own
folder, flushed, fsynced, renamed over the old one, the folder fsynced; a failed write
removes its temporary file and raises, the old checkpoint untouched.

Lightning deletes an old checkpoint only after the new one is saved (`ModelCheckpoint`
saves, then removes the previous file, and only if its name differs), and a run's
checkpoints keep one name each (`last.ckpt`, `best.ckpt`), which the rename replaces: no
moment exists without a whole checkpoint on disk.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.utilities.cloud_io import _is_local_file_protocol
from lightning.fabric.utilities.types import _PATH
from lightning.pytorch.plugins.io import CheckpointIO, TorchCheckpointIO

from oodmol.errors import UserError
from oodmol.io import atomic_write_bytes


class AtomicCheckpointIO(TorchCheckpointIO):
    """`TorchCheckpointIO` whose local saves are atomic (remote ones stay fsspec's).

    The checkpoint is serialised in memory first, as Lightning does, so that a failed
    write is an OSError that keeps its errno (ENOSPC, EDQUOT): torch.save streaming into
    a file reports any failure as a RuntimeError without one.
    """

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: _PATH, storage_options: Any | None = None
    ) -> None:
        if storage_options is not None or not _is_local_file_protocol(path):
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        atomic_write_bytes(Path(path), buffer.getbuffer())


def run_plugins(configured: Any) -> list:
    """The plugins of a run's Trainer: the configured ones (`trainer.plugins`, a plugin or
    a list, instantiated) and the atomic checkpoint writer. The Trainer hands it to
    whatever strategy it builds (single device, DDP), so every checkpoint of the run goes
    through it: `ModelCheckpoint`'s, the pre-emption checkpoint, `trainer.save_checkpoint`.
    """
    plugins = list(configured) if isinstance(configured, list | tuple) else [configured]
    plugins = [p for p in plugins if p is not None]
    if any(isinstance(p, CheckpointIO) for p in plugins):
        raise UserError(
            "trainer.plugins holds a CheckpointIO plugin; a run writes its checkpoints "
            "through oodmol's atomic one (oodmol.training.checkpoint_io): remove it"
        )
    return [*plugins, AtomicCheckpointIO()]
