"""A pure-torch stand-in for torch-scatter's `scatter`, the one function of it that the
`gotennet` package calls (see ../README.md): the reference environment only."""

from __future__ import annotations

import torch

__version__ = "0.0.0+standin"


def scatter(
    src: torch.Tensor,
    index: torch.Tensor,
    dim: int = -1,
    out: torch.Tensor | None = None,
    dim_size: int | None = None,
    reduce: str = "sum",
) -> torch.Tensor:
    """Reduce the slices of `src` along `dim` that share an `index` ("sum", "add",
    "mean", "min", "max"); `index` is 1-D along `dim` or `src`'s shape."""
    if out is not None:
        raise NotImplementedError("the stand-in does not write into `out`")
    dim = dim % src.dim()
    if index.dim() == 1:
        shape = [1] * src.dim()
        shape[dim] = -1
        index = index.view(shape).expand_as(src)
    size = list(src.shape)
    if dim_size is None:
        dim_size = int(index.max()) + 1 if index.numel() else 0
    size[dim] = dim_size
    if reduce in ("sum", "add"):
        return src.new_zeros(size).scatter_add_(dim, index, src)
    if reduce in ("mean", "min", "max"):
        mode = {"mean": "mean", "min": "amin", "max": "amax"}[reduce]
        return src.new_zeros(size).scatter_reduce_(dim, index, src, mode, include_self=False)
    raise ValueError(f"unknown reduce {reduce!r}")
