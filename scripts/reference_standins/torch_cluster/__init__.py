"""A pure-torch stand-in for torch-cluster's `radius_graph`, the one function of it that
the `gotennet` package calls (see ../README.md): the reference environment only."""

from __future__ import annotations

import torch

__version__ = "0.0.0+standin"


def radius_graph(
    x: torch.Tensor,
    r: float,
    batch: torch.Tensor | None = None,
    loop: bool = False,
    max_num_neighbors: int = 32,
    flow: str = "source_to_target",
    num_workers: int = 1,
    batch_size: int | None = None,
) -> torch.Tensor:
    """Edges [2, E] between points of the same `batch` entry closer than `r` (with
    `loop`, each point to itself too), at most `max_num_neighbors` per centre, the
    self-loop counted among them, kept in index order as torch-cluster's CUDA search keeps
    them. Row 0 is the neighbour and row 1 the centre for `source_to_target`, swapped for
    `target_to_source`; edges are ordered by centre, then neighbour."""
    if flow not in ("source_to_target", "target_to_source"):
        raise ValueError(f"unknown flow {flow!r}")
    n = x.shape[0]
    if batch is None:
        batch = x.new_zeros(n, dtype=torch.long)
    squared = torch.cdist(x, x).pow(2)
    close = (squared < r * r) & (batch.unsqueeze(0) == batch.unsqueeze(1))
    eye = torch.eye(n, dtype=torch.bool, device=x.device)
    close = close | eye if loop else close & ~eye
    centre, neighbour = torch.nonzero(close, as_tuple=True)  # row-major: by centre
    rank = torch.cumsum(close.long(), dim=1)[centre, neighbour] - 1
    keep = rank < max_num_neighbors
    centre, neighbour = centre[keep], neighbour[keep]
    if flow == "source_to_target":
        return torch.stack([neighbour, centre])
    return torch.stack([centre, neighbour])
