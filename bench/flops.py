"""What a training step does, counted as it runs: its floating-point operations, the
bytes its gathers and scatters move, the shapes of its matrix products; and the floor
these set on its time at this machine's measured matmul peak (`matmul_floor_ms`, the
ceiling of a reference bench's ratio). Imports nothing of bench/: the harness and the
roofline bench stand on it."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

aten = torch.ops.aten
GATHERS = {
    aten.index_select.default,
    aten.gather.default,
    aten.index.Tensor,
    aten.embedding.default,
}
SCATTERS = {
    aten.index_add.default,
    aten.index_add_.default,
    aten.scatter_add.default,
    aten.scatter_add_.default,
    aten.scatter_reduce.two,
    aten.scatter_reduce_.two,
    aten.index_put.default,
    aten.index_put_.default,
    aten._index_put_impl_.default,
    aten.embedding_dense_backward.default,
}
MATMULS = {aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default}


def tensor_bytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _index_bytes(args, kwargs) -> int:
    tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    indices = [t for t in tensors if not t.is_floating_point()]
    for a in args:  # aten.index / index_put take a list of index tensors
        if isinstance(a, (list, tuple)):
            indices += [t for t in a if isinstance(t, torch.Tensor)]
    return sum(tensor_bytes(t) for t in indices)


class TrafficCounter(TorchDispatchMode):
    """Counts every aten call, the bytes gathers and scatters move, and the (M, K, N,
    dtype) of matrix products with their FLOPs, so the peak can be measured at the
    model's own shapes."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.tensor_bytes = 0
        self.index_calls = 0
        self.matmul_calls = 0
        self.gather_bytes = 0
        self.scatter_bytes = 0
        self.matmul_flops: dict[tuple, int] = defaultdict(int)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.calls += 1
        outputs = out if isinstance(out, (list, tuple)) else [out]
        self.tensor_bytes += sum(
            tensor_bytes(t)
            for t in (*args, *kwargs.values(), *outputs)
            if isinstance(t, torch.Tensor)
        )
        self.index_calls += func in GATHERS or func in SCATTERS
        self.matmul_calls += func in MATMULS
        if func in GATHERS and isinstance(out, torch.Tensor):
            self.gather_bytes += 2 * tensor_bytes(out) + _index_bytes(args, kwargs)
        elif func in SCATTERS:
            sources = [
                a for a in (*args[1:], *kwargs.values())
                if isinstance(a, torch.Tensor) and a.is_floating_point()
            ]  # fmt: skip
            # embedding_dense_backward's source is its first argument
            source = max((tensor_bytes(s) for s in sources), default=tensor_bytes(args[0]))
            self.scatter_bytes += 3 * source + _index_bytes(args, kwargs)
        elif func in MATMULS:
            a, b = (
                (args[1], args[2])
                if func in (aten.addmm.default, aten.baddbmm.default)
                else args[:2]
            )
            batch = a.shape[0] if a.dim() == 3 else 1
            m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
            self.matmul_flops[(batch, m, k, n, str(a.dtype))] += 2 * batch * m * k * n
        return out


def matmul_gflops(batch: int, m: int, k: int, n: int, dtype: torch.dtype, seconds=0.3) -> float:
    """Attained GFLOP/s of repeated products of this shape (the machine's limit for it)."""
    a = torch.randn(batch, m, k, dtype=dtype)
    b = torch.randn(batch, k, n, dtype=dtype)
    torch.bmm(a, b)
    repeats, started = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        torch.bmm(a, b)
        repeats += 1
    return 2 * batch * m * k * n * repeats / elapsed / 1e9


def dominant_matmul(traffic: TrafficCounter) -> tuple[int, int, int, int, torch.dtype]:
    """(batch, M, K, N, dtype) of the matrix product that carries most of the counted
    FLOPs: the shape at which this machine's peak is measured for the model."""
    (batch, m, k, n, dtype), _ = max(traffic.matmul_flops.items(), key=lambda kv: kv[1])
    return batch, m, k, n, getattr(torch, dtype.removeprefix("torch."))


def matmul_floor_ms(run_steps: Callable[[], object], n_steps: int) -> float:
    """The shortest a step could take here: its counted FLOPs (over `run_steps`, which
    runs `n_steps` steps) at the measured peak of its typical shape. Optimistic on
    purpose (elementwise work and slower shapes cost nothing), so a reference's step
    time over this floor bounds the reference ratio a model can reach without doing
    fewer FLOPs."""
    flops, traffic = FlopCounterMode(display=False), TrafficCounter()
    with flops, traffic:
        run_steps()
    peak_gflops = matmul_gflops(*dominant_matmul(traffic))
    return 1e3 * flops.get_total_flops() / n_steps / 1e9 / peak_gflops
