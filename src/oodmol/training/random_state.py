"""Random generators in the checkpoint, so that a resumed run draws what the uninterrupted
run would have drawn (dropout masks, MC dropout passes, anything a model samples)."""

from __future__ import annotations

import random

import lightning as L
import numpy as np
import torch


class RandomState(L.Callback):
    """Saves Python's, NumPy's and torch's (CPU and CUDA) generator states with every
    checkpoint and restores them when training resumes from one.

    Lightning's own sanity check runs inside `isolate_rng`, and the data loaders have
    generators of their own (`MoleculeDataModule`), so between the restore and the next
    training batch nothing else draws from these generators. The states are tensors and
    plain numbers, which `torch.load(..., weights_only=True)` accepts. Under DDP the
    checkpoint holds rank 0's states; every rank draws the same sequence in lockstep.
    """

    def state_dict(self) -> dict:
        numpy_state = np.random.get_state()
        state = {
            "python": _plain(random.getstate()),
            "numpy": {
                "keys": torch.from_numpy(numpy_state[1].astype(np.int64)),
                "position": int(numpy_state[2]),
                "has_gauss": int(numpy_state[3]),
                "cached_gaussian": float(numpy_state[4]),
            },
            "torch": torch.get_rng_state(),
        }
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["cuda"] = torch.cuda.get_rng_state_all()
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        version, keys, gauss = state_dict["python"]
        random.setstate((version, tuple(keys), gauss))
        saved = state_dict["numpy"]
        np.random.set_state(
            (
                "MT19937",
                saved["keys"].numpy().astype(np.uint32),
                saved["position"],
                saved["has_gauss"],
                saved["cached_gaussian"],
            )
        )
        torch.set_rng_state(state_dict["torch"])
        if "cuda" in state_dict and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state_dict["cuda"])


def _plain(python_state: tuple) -> tuple:
    version, keys, gauss = python_state
    return version, list(keys), gauss
