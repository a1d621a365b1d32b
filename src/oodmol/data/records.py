"""One molecule's record in a feature cache: named arrays in a pickle-free format.

A record is a little-endian uint32 header length, a JSON header of ``[name, dtype,
shape, offset]`` entries (space-padded to 8 bytes), then each array's raw C-order bytes
at its offset from the end of the header. Reading checks every entry against the
record's own bytes, so a record damaged before its cache was sealed (the seal then
matches) raises `UndecodableRecord` saying what is wrong, never a numpy or JSON error
from deep inside, nor an allocation of whatever size a damaged header claims.
"""

from __future__ import annotations

import json
import math
import struct

import numpy as np

ALIGN = 8  # every stored array starts at a multiple of this many bytes
_NUMERIC = "biufc"

Entry = tuple[str, np.dtype, tuple[int, ...], int]  # name, dtype, shape, absolute offset


class UndecodableRecord(ValueError):
    """A record that is not what `encode_arrays` writes."""


def encode_arrays(arrays: dict[str, np.ndarray]) -> bytes:
    """Named numeric arrays as one record (see the module docstring)."""
    arrays = {name: np.asarray(a) for name, a in arrays.items()}
    entries, size = [], 0
    for name, a in arrays.items():
        if a.dtype.kind not in _NUMERIC:
            raise TypeError(f"array {name!r} has dtype {a.dtype}; only numeric arrays are stored")
        entries.append([name, a.dtype.str, list(a.shape), size])
        size = aligned(size + a.nbytes)
    header = json.dumps(entries, separators=(",", ":")).encode()
    header += b" " * (aligned(4 + len(header)) - 4 - len(header))
    start = 4 + len(header)
    out = bytearray(start + size)
    struct.pack_into("<I", out, 0, len(header))
    out[4:start] = header
    for (_, _, _, offset), a in zip(entries, arrays.values(), strict=True):
        out[start + offset : start + offset + a.nbytes] = a.tobytes()
    return bytes(out)


def decode_arrays(value: bytes | bytearray | memoryview) -> dict[str, np.ndarray]:
    """Inverse of `encode_arrays`: views into `value` (writable if `value` is)."""
    return {
        name: np.frombuffer(value, dtype, math.prod(shape), offset).reshape(shape)
        for name, dtype, shape, offset in entries(value)
    }


def header_of(value: bytes | bytearray | memoryview) -> bytes:
    """The record's header bytes (length and JSON), which records of one featuriser
    share wherever their arrays have the same shapes."""
    if len(value) < 4:
        raise UndecodableRecord(f"{len(value)} bytes, shorter than a header")
    (n,) = struct.unpack_from("<I", value)
    if 4 + n > len(value):
        raise UndecodableRecord(f"a header of {n} bytes in a record of {len(value)}")
    return bytes(value[: 4 + n])


def entries(value: bytes | bytearray | memoryview) -> list[Entry]:
    """The arrays a record holds, each checked to be numeric and to lie within it."""
    header = header_of(value)
    try:
        listed = json.loads(header[4:])
    except ValueError as error:  # not JSON, or not UTF-8
        raise UndecodableRecord(f"its header is not JSON ({error})") from None
    if not isinstance(listed, list):
        raise UndecodableRecord("its header is not a list of arrays")
    return [_entry(item, len(header), len(value)) for item in listed]


def _entry(item: object, start: int, size: int) -> Entry:
    if not (isinstance(item, list) and len(item) == 4):
        raise UndecodableRecord(f"header entry {item!r:.80} is not [name, dtype, shape, offset]")
    name, dtype, shape, offset = item
    try:
        dtype = np.dtype(dtype)
    except (TypeError, ValueError):
        raise UndecodableRecord(f"array {name!r:.40} has no dtype ({dtype!r:.40})") from None
    whole = isinstance(offset, int) and isinstance(shape, list)
    whole = whole and all(isinstance(d, int) and not isinstance(d, bool) for d in [offset, *shape])
    if not isinstance(name, str) or dtype.kind not in _NUMERIC or not whole:
        raise UndecodableRecord(f"header entry {item!r:.80} is not a numeric array's")
    if offset < 0 or any(d < 0 for d in shape):
        raise UndecodableRecord(f"array {name!r:.40} has a negative offset or size")
    end = start + offset + math.prod(shape) * dtype.itemsize
    if end > size:
        raise UndecodableRecord(f"array {name!r:.40} ends at byte {end} of a {size}-byte record")
    return name, dtype, tuple(shape), start + offset


def aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN
