"""The feature cache: featurise a data set once, in parallel, and verify it on every open.

One LMDB file per (data set structure, featuriser, params), named
``{table}-{featurizer}-{key[:16]}.lmdb``; key = sha256 of everything that changes the
content. Values are named arrays in a pickle-free format (`oodmol.data.records`); keys are
mol_ids as 8-byte big-endian int64; a ``__meta__`` record is written last.

Integrity: LMDB does not checksum its pages, and on a truncated or damaged file it can
kill the process (SIGBUS, abort) where no Python code can catch it: in a fuzz test
(py-lmdb 3.0, LMDB 0.9.36) it did so for nearly every truncation and a few percent of
page-header overwrites. So the file's bytes are checked *before* LMDB maps it, which
means the checksum cannot live inside the file: a seal beside it
(``<cache>.lmdb.seal``: size and CRC32 of the finished file) is written at the end of
the build, and every `FeatureStore.build_or_open` re-reads the whole file once against
it (about 0.25 s for a 270 MB cache, QM9 descriptors). A file that fails any check is
reported with a warning and rebuilt. Worker processes that receive a store trust the
check their parent made.

A sealed cache that holds the molecules asked for opens without a lock and without
writing anything, so it can sit on a read-only disk. Builds run under a
`filelock.FileLock` on ``<cache>.lmdb.lock`` (`oodmol.locks.build_lock`): a process that
waited for the lock finds the finished cache and opens it instead of building it again.
Files are written under a temporary name in the same folder, synced, and moved into place
with `os.replace`, so a reader sees either no cache or a sealed one; like every file
oodmol writes, they get the umask's mode.

Subsets: a cache may hold only some of its table's molecules (`build_or_open` with
`mol_ids`: a run on a subset of each set). It is the same file, under the same key and
seal, as the whole cache; a later request for molecules it lacks featurises only those and
writes them, with every molecule it held, into a new file that is sealed and moved into
its place. A molecule a cache holds neither features nor a failure for is absent: reading
it raises `KeyError`.

Every build keeps a journal beside its cache while it builds
(``<cache>.lmdb.journal/``): every minute or so, the molecules finished since the last
part (their encoded features, or why they failed) are written as one part file,
atomically (temporary name, sync, rename) and checked by its own CRC32 on reading. A build
that was stopped (a signal, a crash, a killed process, a reboot) and is started again with
the same key reads the journal (merging its parts into one where there are many),
featurises only the molecules it lacks, and writes the cache from both; the journal is
deleted once the cache is sealed. A damaged part is ignored with a warning (its molecules
are featurised again). While it builds, a build logs how many molecules are done and an
estimate of the time left.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import math
import os
import secrets
import shutil
import struct
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing, suppress
from datetime import datetime, timezone
from functools import partial, reduce
from pathlib import Path
from typing import TypeVar

import lmdb
import numpy as np

from oodmol.data.featurize.base import FeaturizationError, Featurizer, MolInput, inputs_of
from oodmol.data.limits import shown
from oodmol.data.records import UndecodableRecord, decode_arrays, encode_arrays, entries, header_of
from oodmol.data.table import MoleculeTable
from oodmol.errors import UserError
from oodmol.interrupts import interruptible
from oodmol.io import atomic_write_json
from oodmol.locks import build_lock
from oodmol.names import inside
from oodmol.parallel import Refused, process_map, worker_count

FORMAT_VERSION = 1
META_KEY = b"__meta__"
_MAX_EXAMPLES = 10
_BATCH = 512  # records per write transaction
_INITIAL_MAP_SIZE = 64 << 20  # doubled whenever the file outgrows it
_READ_CHUNK = 8 << 20
_SEAL_BYTES = 4096  # read of a seal file at most: a damaged one may be any size

log = logging.getLogger(__name__)
T = TypeVar("T")
Buffer = bytes | bytearray | memoryview
# what a stopped build leaves: its journal
JOURNAL_KEPT = "the molecules done are kept in its journal; run again to go on from them"

# what one molecule's featurisation gave: encoded features, non-finite values, failure
Outcome = tuple[bytes | None, int, str | None]

_environments: dict[tuple[int, int], lmdb.Environment] = {}  # (st_dev, st_ino) -> handle
_environments_pid = os.getpid()


class FeatureStore:
    """Read access to one verified feature cache.

    Holds only the path and meta, so it pickles into DataLoader workers; reads go
    through this process's read-only LMDB handle for the file (`_environment`), opened
    on first use.
    """

    def __init__(self, path: Path, meta: dict) -> None:
        self.path = Path(path)
        self.meta = meta

    @classmethod
    def build_or_open(
        cls,
        featurizer: Featurizer,
        table: MoleculeTable,
        cache_dir: str | os.PathLike,
        n_jobs: int | None = None,
        progress: bool = True,
        mol_ids: Iterable[int] | None = None,
    ) -> FeatureStore:
        """Open the cache of `featurizer` on `table`, building it first if it is absent,
        stale, damaged or lacks any of `mol_ids` (None: every molecule of `table`).

        The cache may hold more molecules than asked for, never fewer: one that lacks
        some is extended by them alone (see the module docstring). `n_jobs=None` uses
        every core this process may run on (`available_cores`), never more than
        `oodmol.parallel.limit_cores` allows. Molecules are featurised in worker
        processes (`oodmol.parallel.process_map`), one at a time each: a molecule that
        crashes its worker or runs past the featuriser's `time_limit` is recorded in
        `failed` with the reason, and the rest go on. A cache that must be built in a
        folder this process cannot write to raises `ReadOnlyCacheError`; a mol_id that is
        not in `table` raises `KeyError`.
        """
        if parts := featurizer.joins():
            return JoinedStore(
                featurizer.name,
                [cls.build_or_open(p, table, cache_dir, n_jobs, progress, mol_ids) for p in parts],
                featurizer.beside_graph,
            )
        identity = {
            "format": FORMAT_VERSION,
            "table": table.name,
            "structure_hash": table.structure_hash(),
            "featurizer": featurizer.name,
            "params": featurizer.params(),
        }
        key = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
        name = f"{table.name}-{featurizer.name}-{key[:16]}.lmdb"
        path = inside(cache_dir, name, "feature cache")
        wanted = None if mol_ids is None else np.unique(np.fromiter(mol_ids, np.int64))
        if wanted is not None:
            table.rows_of(wanted)  # raises naming any molecule the table does not have
        meta, problem = _check(path, key)
        if meta is not None and not _lacking(cls(path, meta), table, wanted).size:
            return cls(path, meta)
        why = problem or ("lacks molecules" if meta is not None else "is missing")
        with build_lock(Path(f"{path}.lock"), f"feature cache {path} {why}"):
            meta, problem = _check(path, key)  # another process may have built it meanwhile
            held = None if meta is None else cls(path, meta)
            if held is not None and not _lacking(held, table, wanted).size:
                return held
            if problem is not None:
                log.warning("feature cache %s %s; rebuilding it", path, problem)
            _remove_leftovers(path)
            journal = Journal(_journal_path(path), key)

            def write(tmp: Path) -> dict:
                return _write(
                    tmp, key, identity, featurizer, table, wanted, held, n_jobs, progress, journal
                )

            meta = _build(path, write, journal)
        return cls(path, meta)

    def __len__(self) -> int:
        return self.meta["n_entries"]

    @property
    def failed(self) -> dict[int, str]:
        """Molecules the featuriser could not represent, refused as too large, or that
        crashed or overran their worker (mol_id → reason); they have no record in the
        cache."""
        return {int(mol_id): reason for mol_id, reason in self.meta.get("failed", {}).items()}

    def mol_ids(self) -> np.ndarray:
        """Every molecule the cache holds features or a failure for, sorted."""
        with _environment(self.path).begin() as txn:
            held = [k for k in txn.cursor().iternext(values=False) if k != META_KEY]
        ids = [struct.unpack(">q", k)[0] for k in held] + list(self.failed)
        return np.sort(np.array(ids, dtype=np.int64))

    def lacks(self, mol_ids: Iterable[int]) -> np.ndarray:
        """The molecules among `mol_ids` the cache holds neither features nor a failure
        for (a cache built for a subset): reading one raises `KeyError`."""
        failed = self.meta.get("failed", {})
        with _environment(self.path).begin(buffers=True) as txn:
            lacking = [
                mol_id
                for mol_id in np.asarray(mol_ids, dtype=np.int64).tolist()
                if str(mol_id) not in failed and txn.get(_key(mol_id)) is None
            ]
        return np.array(lacking, dtype=np.int64)

    def get(self, mol_id: int) -> dict[str, np.ndarray]:
        """The arrays of one molecule: writable, owned by the caller (one copy out of
        the memory map)."""
        with _environment(self.path).begin(buffers=True) as txn:
            return self._read(mol_id, bytearray(self._record(txn, mol_id)), decode_arrays)

    def iter_arrays(self, mol_ids: Iterable[int]) -> Iterator[dict[str, np.ndarray]]:
        """The arrays of many molecules (as `get` gives them), read in one transaction:
        for features whose shapes differ between molecules, such as graphs."""
        with _environment(self.path).begin(buffers=True) as txn:
            for mol_id in np.asarray(mol_ids, dtype=np.int64).tolist():
                yield self._read(mol_id, bytearray(self._record(txn, mol_id)), decode_arrays)

    def matrix(self, mol_ids: Iterable[int], field: str = "x") -> np.ndarray:
        """One field of many molecules stacked into a new array, in one read transaction.

        The field must have the same shape and dtype for every molecule (descriptor or
        fingerprint vectors); the header is parsed only when its bytes change."""
        mol_ids = np.asarray(mol_ids, dtype=np.int64).tolist()
        out = None
        header = dtype = shape = offset = None
        end = 0
        with _environment(self.path).begin(buffers=True) as txn:
            if not mol_ids:
                key, value = next((k, v) for k, v in txn.cursor() if k != META_KEY)
                dtype, shape, _ = self._field(struct.unpack(">q", key)[0], value, field)
                return np.empty((0, *shape), dtype=dtype)
            for i, mol_id in enumerate(mol_ids):
                value = self._record(txn, mol_id)
                if (record_header := self._read(mol_id, value, header_of)) != header:
                    header = record_header
                    spec = self._field(mol_id, value, field)
                    if out is None:
                        dtype, shape, _ = spec
                        out = np.empty((len(mol_ids), *shape), dtype=dtype)
                    elif spec[:2] != (dtype, shape):
                        raise ValueError(
                            f"field {field!r} of mol_id {mol_id} is {spec[0]}{spec[1]}, earlier "
                            f"molecules have {dtype}{shape}: use get() for varying shapes"
                        )
                    offset = spec[2]
                    end = offset + out[0].nbytes
                if len(value) < end:
                    raise self._damaged(mol_id, f"{len(value)} bytes; its {field!r} ends at {end}")
                out[i] = np.frombuffer(value, dtype, math.prod(shape), offset).reshape(shape)
        return out

    def _record(self, txn: lmdb.Transaction, mol_id: int) -> memoryview:
        """The bytes of one molecule's record: every molecule the cache was built for
        has one, unless the featuriser failed on it."""
        try:
            value = txn.get(_key(mol_id))
        except lmdb.Error as error:
            raise self._damaged(mol_id, f"LMDB: {error}") from None
        if value is None:
            raise MissingRecordError(
                f"mol_id {mol_id} not in feature cache {self.path}; if the cache was built "
                f"for it, the cache is damaged: {self._remedy()}"
            )
        return value

    def _read(self, mol_id: int, value: Buffer, read: Callable[[Buffer], T]) -> T:
        """`read(value)` of one molecule's record; a record it cannot make sense of
        means a damaged cache."""
        try:
            return read(value)
        except UndecodableRecord as error:
            raise self._damaged(mol_id, str(error)) from None

    def _field(self, mol_id: int, value: Buffer, field: str) -> tuple[np.dtype, tuple, int]:
        """dtype, shape and byte offset of one named array of a record."""
        for name, dtype, shape, offset in self._read(mol_id, value, entries):
            if name == field:
                return dtype, shape, offset
        raise KeyError(f"no field {field!r} in the feature cache")

    def _damaged(self, mol_id: int, what: str) -> DamagedCacheError:
        return DamagedCacheError(
            f"feature cache {self.path} is damaged (the record of mol_id {mol_id}: {what}), "
            f"although it matches its seal: {self._remedy()}"
        )

    def _remedy(self) -> str:
        return f"delete it and {_seal_path(self.path).name} beside it, then run again to rebuild it"


class JoinedStore(FeatureStore):
    """The caches of a joined featuriser's parts read as one: a molecule's `x` is the
    parts' `x` side by side, in the parts' order, or with `beside_graph` the first part's
    arrays (a graph) and the other parts' `x` side by side as `x_d`; a molecule any part
    refused is refused (with that part's reason). Its key is the parts' keys together."""

    def __init__(self, name: str, parts: list[FeatureStore], beside_graph: bool = False) -> None:
        self.parts = parts
        self.beside_graph = beside_graph
        failed: dict[str, str] = {}
        for part in reversed(parts):  # the first part's reason where several refused
            name_of = part.meta["featurizer"]["name"]
            failed |= {str(mol_id): f"{name_of}: {why}" for mol_id, why in part.failed.items()}
        keys = "+".join(part.meta["key"] for part in parts)
        # beside a graph, only the graph's count: the vectors' are imputed when read
        counted = parts[:1] if beside_graph else parts
        meta = {
            "key": hashlib.sha256(keys.encode()).hexdigest(),
            "featurizer": {"name": name, "parts": [part.meta["featurizer"] for part in parts]},
            "n_nonfinite_values": sum(part.meta["n_nonfinite_values"] for part in counted),
            "nonfinite_examples": [e for p in counted for e in p.meta["nonfinite_examples"]],
            "failed": failed,
        }
        super().__init__(parts[0].path, meta)
        self.meta["n_entries"] = len(np.setdiff1d(self.mol_ids(), list(self.failed)))

    def mol_ids(self) -> np.ndarray:
        return reduce(np.intersect1d, [part.mol_ids() for part in self.parts])

    def lacks(self, mol_ids: Iterable[int]) -> np.ndarray:
        return np.unique(np.concatenate([part.lacks(mol_ids) for part in self.parts]))

    def get(self, mol_id: int) -> dict[str, np.ndarray]:
        return self._joined([part.get(mol_id) for part in self.parts])

    def iter_arrays(self, mol_ids: Iterable[int]) -> Iterator[dict[str, np.ndarray]]:
        ids = np.asarray(mol_ids, dtype=np.int64)
        readers = [part.iter_arrays(ids) for part in self.parts]
        for arrays in zip(*readers, strict=True):
            yield self._joined(list(arrays))

    def _joined(self, arrays: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        if self.beside_graph:
            return arrays[0] | {"x_d": np.concatenate([a["x"] for a in arrays[1:]])}
        return {"x": np.concatenate([a["x"] for a in arrays])}

    def matrix(self, mol_ids: Iterable[int], field: str = "x") -> np.ndarray:
        ids = np.asarray(mol_ids, dtype=np.int64)
        if self.beside_graph:
            if field != "x_d":
                return self.parts[0].matrix(ids, field)
            return np.hstack([part.matrix(ids) for part in self.parts[1:]])
        return np.hstack([part.matrix(ids, field) for part in self.parts])


class DamagedCacheError(UserError, ValueError):
    """A feature cache whose bytes match its seal but whose records cannot be read: it
    was damaged before it was sealed (or sealed again after). Deleting it rebuilds it."""


class MissingRecordError(UserError, KeyError):
    """A molecule the cache holds neither features nor a failure for: one it was not
    built for (`lacks` tells which), or, in a cache built for it, a damaged key."""

    def __str__(self) -> str:
        return str(self.args[0])


def _key(mol_id: int) -> bytes:
    return struct.pack(">q", int(mol_id))


def _seal_path(path: Path) -> Path:
    return path.with_name(path.name + ".seal")


def _journal_path(path: Path) -> Path:
    return path.with_name(path.name + ".journal")


def _environment(path: Path) -> lmdb.Environment:
    """This process's read-only handle on the cache file now at `path`.

    LMDB lets a process open a file once, so every store and check on that file shares
    one handle, kept open for the life of the process. Handles must not cross fork:
    a child (e.g. a DataLoader worker) closes its inherited copies and opens its own.
    Keyed by inode, so a file rebuilt under the same name gets a fresh handle.
    """
    global _environments_pid
    if _environments_pid != os.getpid():
        for env in _environments.values():
            env.close()  # this process's copy only; the parent's handle is unaffected
        _environments.clear()
        _environments_pid = os.getpid()
    stat = path.stat()
    key = (stat.st_dev, stat.st_ino)
    if key not in _environments:
        _environments[key] = lmdb.open(str(path), subdir=False, readonly=True, lock=False)
    return _environments[key]


def _file_crc(path: Path) -> int:
    buf = bytearray(_READ_CHUNK)
    view = memoryview(buf)
    crc = 0
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            crc = zlib.crc32(view[:n], crc)
    return crc


def _check(path: Path, key: str) -> tuple[dict | None, str | None]:
    """The cache's meta if it is complete, intact and built for `key`; otherwise None
    and what is wrong with it (None when there is no cache at all)."""
    if not path.exists():
        return None, None
    try:
        with open(_seal_path(path), "rb") as handle:
            seal = json.loads(handle.read(_SEAL_BYTES))  # a seal is a few dozen bytes
        sealed_size, sealed_crc = int(seal["size"]), int(seal["crc32"])
    except FileNotFoundError:
        return None, "has no seal file (its build did not finish)"
    except (OSError, ValueError, KeyError, TypeError) as e:
        return None, f"has an unreadable seal file ({e!r})"
    try:
        size = path.stat().st_size
        if size != sealed_size:
            return None, f"is truncated or overwritten ({size} bytes, sealed at {sealed_size})"
        if _file_crc(path) != sealed_crc:
            return None, "is corrupted (the CRC32 of its bytes does not match its seal)"
        # Only now may LMDB map the file (see the module docstring).
        env = _environment(path)
        with env.begin() as txn:
            raw = txn.get(META_KEY)
        n_entries = env.stat()["entries"] - 1
    except (OSError, lmdb.Error) as e:
        return None, f"cannot be read ({e!r})"
    if raw is None:
        return None, "has no __meta__ record (its build did not finish)"
    try:
        meta = json.loads(raw)
    except ValueError:
        return None, "has an unreadable __meta__ record"
    if not isinstance(meta, dict) or meta.get("key") != key:
        return None, "is stale (built for other molecules or featuriser settings)"
    if meta.get("n_entries") != n_entries:
        return None, f"holds {n_entries} entries but its meta says {meta.get('n_entries')}"
    if not _readable_meta(meta):
        return None, "has a damaged __meta__ record (a field of the wrong kind)"
    return meta, None


def _lacking(store: FeatureStore, table: MoleculeTable, wanted: np.ndarray | None) -> np.ndarray:
    """The molecules of `wanted` (None: every molecule of `table`) that `store` lacks."""
    if len(store) + len(store.failed) == len(table):
        return np.empty(0, dtype=np.int64)  # it holds every molecule of its table
    return store.lacks(table.mol_id if wanted is None else wanted)


def _readable_meta(meta: dict) -> bool:
    """Whether the meta fields its readers use have their kinds (the seal cannot tell a
    record damaged before it was sealed). Caches older than `failed` have none."""
    failed, featurizer = meta.get("failed", {}), meta.get("featurizer")
    return (
        isinstance(failed, dict)
        and all(k.lstrip("-").isdigit() and isinstance(v, str) for k, v in failed.items())
        and isinstance(featurizer, dict)
        and isinstance(featurizer.get("name"), str)
        and isinstance(meta.get("n_nonfinite_values"), int)
        and isinstance(meta.get("nonfinite_examples"), list)
    )


def _remove_leftovers(path: Path) -> None:
    """Delete temporary files of builds that died; call only while holding the lock."""
    for leftover in path.parent.glob(f"{path.name}.tmp-*"):
        log.warning("removing %s, left behind by an interrupted feature cache build", leftover)
        leftover.unlink(missing_ok=True)


def _build(path: Path, write: Callable[[Path], dict], journal: Journal) -> dict:
    """The cache `path` as `write(tmp)` writes it (under a temporary name; it returns the
    meta record), moved into place and sealed, or nothing new: a build that fails or is
    stopped by SIGTERM or SIGINT (`Interrupted`, which ends its worker processes on the
    way) removes its temporary file, and the cache file and its seal once the file had
    begun to take their place. Its `journal` is kept until the cache is sealed, so that
    the next build goes on from the molecules it finished."""
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    replacing = False
    try:
        with interruptible(f"featurising {path}", JOURNAL_KEPT):
            meta = write(tmp)
            seal = {"size": tmp.stat().st_size, "crc32": _file_crc(tmp)}
            replacing = True
            os.replace(tmp, path)
            atomic_write_json(_seal_path(path), seal)  # last: an unsealed file is rebuilt
    except BaseException:
        tmp.unlink(missing_ok=True)
        if replacing:
            path.unlink(missing_ok=True)
            _seal_path(path).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
    journal.remove()
    return meta


def _inputs(
    featurizer: Featurizer,
    table: MoleculeTable,
    mol_ids: list[int],
    cache_dir: Path,
    n_jobs: int,
    progress: bool,
) -> list[MolInput]:
    """What `featurizer` sees of the molecules `mol_ids`: their SMILES and the data set's
    geometry, or, for a featuriser built on another's cache, what that cache (built first
    for these molecules where it lacks them) holds of each."""
    rows = table.rows_of(np.asarray(mol_ids, dtype=np.int64))
    source = featurizer.built_on()
    if source is None or not mol_ids:
        return inputs_of(table, rows)
    store = FeatureStore.build_or_open(source, table, cache_dir, n_jobs, progress, mol_ids)
    failed = store.failed
    present = [m for m in mol_ids if m not in failed]
    arrays = dict(zip(present, store.iter_arrays(present), strict=True))
    return [
        featurizer.input_from(str(table.smiles[row]), arrays.get(mol_id), failed.get(mol_id))
        for row, mol_id in zip(rows.tolist(), mol_ids, strict=True)
    ]


def _write(
    tmp: Path,
    key: str,
    identity: dict,
    featurizer: Featurizer,
    table: MoleculeTable,
    wanted: np.ndarray | None,
    held: FeatureStore | None,
    n_jobs: int | None,
    progress: bool,
    journal: Journal,
) -> dict:
    """Write a new LMDB file of the molecules `held` (the cache it replaces), those of
    the `journal`, and `wanted` (None: every molecule of `table`); those neither holds are
    featurised and added to the journal. The meta record goes in last."""
    old = set() if held is None else set(held.mol_ids().tolist())
    journaled = {m: outcome for m, outcome in journal.read().items() if m not in old}
    mol_ids = sorted(
        old.union(journaled, (table.mol_id if wanted is None else wanted).tolist()), key=_key
    )  # LMDB appends in key order
    if META_KEY in map(_key, mol_ids):
        raise ValueError(f"table {table.name!r}: a mol_id collides with the meta record key")
    fresh = [m for m in mol_ids if m not in old and m not in journaled]
    n_jobs = min(worker_count(n_jobs), max(len(fresh), 1))
    inputs = _inputs(featurizer, table, fresh, tmp.parent, n_jobs, progress)
    inputs = dict(zip(fresh, inputs, strict=True))
    started = time.perf_counter()
    _log_start(featurizer, table, len(mol_ids), len(fresh), n_jobs)
    nonfinite_molecules, nonfinite_values, examples = 0, 0, []
    failed: dict[str, str] = {}
    env = lmdb.open(
        str(tmp),
        subdir=False,
        lock=False,
        sync=False,
        metasync=False,
        map_size=_INITIAL_MAP_SIZE,
        mode=0o666,  # less the umask; py-lmdb's 0o755 (less x bits) never lets the group write
    )
    try:
        batch = []
        results = process_map(
            partial(_featurize_one, featurizer),
            ((mol_id, inputs[mol_id]) for mol_id in fresh),
            total=len(fresh),
            desc=f"{table.name}/{featurizer.name}",
            n_jobs=n_jobs,
            progress=progress,
            time_limit=featurizer.time_limit,
        )
        kept = _outcomes(held, [m for m in mol_ids if m in old])
        failed_before = sum(f is not None for _, _, f in journaled.values())
        failed_before += 0 if held is None else len(held.failed)
        journal.start(len(mol_ids), len(mol_ids) - len(fresh), failed_before, featurizer.name)
        with closing(results), closing(kept):  # workers end here, also when this loop raises
            fresh_outcomes = iter(results)
            for mol_id in mol_ids:
                if mol_id in journaled:
                    value, n_nonfinite, failure = journaled.pop(mol_id)
                elif mol_id in old:
                    value, n_nonfinite, failure = next(kept)
                else:
                    outcome = next(fresh_outcomes)
                    if isinstance(outcome, Refused):  # it crashed or overran its worker
                        outcome = (None, 0, f"{shown(inputs[mol_id].smiles)}: {outcome.reason}")
                    value, n_nonfinite, failure = outcome
                    journal.add(mol_id, value, n_nonfinite, failure)
                if failure is not None:
                    failed[str(mol_id)] = failure
                    continue
                if n_nonfinite:
                    nonfinite_molecules += 1
                    nonfinite_values += n_nonfinite
                    if len(examples) < _MAX_EXAMPLES:
                        examples.append(mol_id)
                batch.append((_key(mol_id), value))
                if len(batch) == _BATCH:
                    _put(env, batch, append=True)
                    batch = []
        journal.flush()
        _put(env, batch, append=True)
        meta = {
            "key": key,
            "format": FORMAT_VERSION,
            "featurizer": {"name": featurizer.name, "params": identity["params"]},
            "table": {"name": table.name, "structure_hash": identity["structure_hash"]},
            "n_entries": len(mol_ids) - len(failed),
            "n_failed": len(failed),
            "failed": failed,
            "n_nonfinite_molecules": nonfinite_molecules,
            "n_nonfinite_values": nonfinite_values,
            "nonfinite_examples": examples,
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "build_seconds": round(time.perf_counter() - started, 2),
        }
        raw_meta = json.dumps(meta).encode()
        _put(env, [(META_KEY, raw_meta)], append=False)
        try:
            env.sync(True)
        except lmdb.Error as error:
            raise _write_error(env, error, 0) from None
    except BaseException:
        with suppress(Exception):  # stopped or failed: keep what was finished for the next build
            journal.flush()
        raise
    finally:
        env.close()
    log.info("built %s in %.1f s", tmp.name, meta["build_seconds"])
    if failed:
        listed = ", ".join(f"mol_id {k}: {v}" for k, v in list(failed.items())[:_MAX_EXAMPLES])
        log.warning(
            "%s could not featurise %d of %d molecules of %s (not in the cache; runs on "
            "it leave them out): %s",
            featurizer.name,
            len(failed),
            len(mol_ids),
            table.name,
            listed,
        )
    return json.loads(raw_meta)  # exactly what a later open reads back


def _log_start(
    featurizer: Featurizer, table: MoleculeTable, n_molecules: int, n_fresh: int, n_jobs: int
) -> None:
    """Say once what this build does, and that a stopped one goes on from its journal."""
    kept = n_molecules - n_fresh
    log.info(
        "featurising %d of the %d molecules of %s with %s on %d cores%s; a stopped build "
        "keeps what it finished, and the next one goes on from there",
        n_fresh,
        len(table),
        table.name,
        featurizer.name,
        n_jobs,
        f" ({kept} more are kept from before)" if kept else "",
    )


def _outcomes(store: FeatureStore | None, mol_ids: list[int]) -> Iterator[Outcome]:
    """What `store` holds of each of `mol_ids`, in their order, as a build's outcomes."""
    if not mol_ids:
        return
    failed = store.failed
    with _environment(store.path).begin(buffers=True) as txn:
        for mol_id in mol_ids:
            if mol_id in failed:
                yield None, 0, failed[mol_id]
            else:
                value = bytes(store._record(txn, mol_id))
                yield value, _count_nonfinite(store._read(mol_id, value, decode_arrays)), None


def _put(env: lmdb.Environment, items: list[tuple[bytes, bytes]], append: bool) -> None:
    """Write one transaction, growing the memory map as often as it needs."""
    while True:
        try:
            with env.begin(write=True) as txn:
                _, added = txn.cursor().putmulti(items, append=append)
            break
        except lmdb.MapFullError:
            env.set_mapsize(2 * env.info()["map_size"])
        except lmdb.Error as error:
            raise _write_error(env, error, sum(len(k) + len(v) for k, v in items)) from None
    if added != len(items):
        raise RuntimeError(f"feature cache: {len(items) - added} records were not written")


def _write_error(env: lmdb.Environment, error: lmdb.Error, size: int) -> Exception:
    """A failed write of the cache `env` is building, as the user should read it. LMDB
    reports a write the disk had no room for without a file name, and a short write
    (the disk filled up during it) as an I/O error: where the disk holding the cache has
    less room left than the `size` bytes being written, it is the full disk it stands for,
    an OSError (ENOSPC) naming the cache. Any other error is returned as it is."""
    tmp = Path(env.path())
    cache = tmp.with_name(tmp.name.split(".tmp-")[0])
    out_of_room = "No space left" in str(error) or shutil.disk_usage(tmp.parent).free < size
    if not out_of_room:
        return error
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(cache))


def _featurize_one(featurizer: Featurizer, job: tuple[int, MolInput]) -> Outcome:
    """Encoded features of one molecule, how many of its values are not finite, and
    why the featuriser could not represent it (then no features)."""
    mol_id, mol = job
    try:
        arrays = featurizer(mol)
    except FeaturizationError as e:
        return None, 0, f"{shown(mol.smiles)}: {e}"
    except Exception as e:
        raise RuntimeError(
            f"featuriser {featurizer.name!r} failed on mol_id {mol_id} ({shown(mol.smiles)}): {e!r}"
        ) from e
    return encode_arrays(arrays), _count_nonfinite(arrays), None


def _count_nonfinite(arrays: dict[str, np.ndarray]) -> int:
    return sum(
        int(np.count_nonzero(~np.isfinite(a))) for a in arrays.values() if a.dtype.kind in "fc"
    )


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_JOURNAL_MAGIC = b"OODMOLJ1"
_JOURNAL_SECONDS = 60.0  # a part at least this often while molecules finish
_JOURNAL_RECORDS = 4096  # ... or once this many are waiting
_JOURNAL_COMPACT = 64  # a build that finds more parts than this merges them into one


class Journal:
    """The finished molecules of a build, in part files that outlive the
    build (see the module docstring).

    A part is ``OODMOLJ1``, the uint32 lengths of its JSON header and of its payload and
    the CRC32 of both, then the header (the cache's key and one
    ``[mol_id, n_bytes, n_nonfinite, failure]`` per molecule) and the molecules' encoded
    features one after another."""

    def __init__(self, folder: Path, key: str) -> None:
        self.folder = Path(folder)
        self.key = key
        self.pending: list[tuple[int, bytes | None, int, str | None]] = []
        self.last_flush = time.monotonic()
        self.total = self.done = self.done_before = self.failed = 0
        self.name = ""
        self.started = time.monotonic()

    def read(self) -> dict[int, Outcome]:
        """Every molecule of the journal's intact parts: mol_id → (encoded features or
        None, non-finite values, failure or None)."""
        found: dict[int, Outcome] = {}
        if not self.folder.is_dir():
            return found
        for leftover in self.folder.glob(".tmp-*"):
            leftover.unlink(missing_ok=True)
        intact = []
        for part in sorted(self.folder.glob("*.part")):
            try:
                found.update(self._read_part(part))
                intact.append(part)
            except (OSError, ValueError, KeyError, TypeError, struct.error) as error:
                log.warning("ignoring damaged journal part %s (%s)", part, error)
        if len(intact) > _JOURNAL_COMPACT:  # one part for them all: fewer files to read
            self._write_part([(m, *outcome) for m, outcome in found.items()])
            for part in intact:
                part.unlink(missing_ok=True)
            _fsync_dir(self.folder)
        return found

    def _read_part(self, part: Path) -> dict[int, Outcome]:
        raw = part.read_bytes()
        magic, n_header, n_payload, crc = struct.unpack_from("<8sIII", raw)
        start = struct.calcsize("<8sIII")
        body = raw[start:]
        if magic != _JOURNAL_MAGIC or len(body) != n_header + n_payload:
            raise ValueError("not a journal part, or truncated")
        if zlib.crc32(body) != crc:
            raise ValueError("CRC32 mismatch")
        header = json.loads(body[:n_header])
        if header["key"] != self.key:
            raise ValueError("written for another cache key")
        records, offset = {}, n_header
        for mol_id, size, n_nonfinite, failure in header["records"]:
            value = None if failure is not None else bytes(body[offset : offset + size])
            offset += size
            records[int(mol_id)] = (value, int(n_nonfinite), failure)
        return records

    def start(self, total: int, done_before: int, failed_before: int, name: str) -> None:
        """Count from here: `total` molecules, `done_before` of them in the journal
        (`failed_before` of those failed)."""
        self.total, self.done, self.done_before, self.name = total, done_before, done_before, name
        self.failed = failed_before
        self.started = self.last_flush = time.monotonic()

    def add(self, mol_id: int, value: bytes | None, n_nonfinite: int, failure: str | None) -> None:
        self.pending.append((int(mol_id), value, int(n_nonfinite), failure))
        self.done += 1
        self.failed += failure is not None
        due = time.monotonic() - self.last_flush >= _JOURNAL_SECONDS
        if due or len(self.pending) >= _JOURNAL_RECORDS:
            self.flush()

    def flush(self) -> None:
        """Write the molecules finished since the last part as a new part, and log the
        progress with an estimate of the time left."""
        self.last_flush = time.monotonic()
        if not self.pending:
            return
        self._write_part(self.pending)
        self.pending = []
        self._log_progress()

    def _write_part(self, items: list[tuple[int, bytes | None, int, str | None]]) -> None:
        """One part file of `items` (mol_id, encoded features, non-finite values,
        failure), written under a temporary name, synced and renamed into place."""
        records = [[m, 0 if v is None else len(v), n, f] for m, v, n, f in items]
        header = json.dumps({"key": self.key, "records": records}).encode()
        payload = b"".join(v for _, v, _, _ in items if v is not None)
        body = header + payload
        crc = zlib.crc32(body)
        self.folder.mkdir(parents=True, exist_ok=True)
        stem = f"{time.time_ns():020d}-{os.getpid()}"
        tmp = self.folder / f".tmp-{stem}"  # never `*.part` until it is whole
        try:
            with open(tmp, "wb") as f:
                f.write(struct.pack("<8sIII", _JOURNAL_MAGIC, len(header), len(payload), crc))
                f.write(body)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.folder / f"{stem}.part")
        except BaseException:  # a stop signal mid-write: the molecules stay pending
            tmp.unlink(missing_ok=True)
            raise
        _fsync_dir(self.folder)

    def _log_progress(self) -> None:
        fresh = self.done - self.done_before
        seconds = time.monotonic() - self.started
        left = self.total - self.done
        rate = seconds / fresh if fresh else float("nan")
        log.info(
            "%s: %d of %d molecules done (%d failed), %.2f s per molecule in this build, "
            "about %s left",
            self.name,
            self.done,
            self.total,
            self.failed,
            rate,
            _duration(left * rate) if fresh else "an unknown time",
        )

    def remove(self) -> None:
        """Delete the journal (its cache is sealed)."""
        if self.folder.is_dir():
            for item in self.folder.iterdir():
                item.unlink(missing_ok=True)
            self.folder.rmdir()


def _duration(seconds: float) -> str:
    """A duration as people say it: 40 s, 12 min, 3.4 h."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
