"""Find a source file: the offline copy in OODMOL_SOURCE_DIR, or a checked download."""

from __future__ import annotations

import csv
import hashlib
import io
import os
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from oodmol.errors import UserError
from oodmol.io import atomic_write_bytes, file_digest
from oodmol.names import check_url, inside

SOURCE_DIR_ENV = "OODMOL_SOURCE_DIR"
CHECKSUMS = ("sha256", "md5")  # the digests public data sets publish


class SourceUnavailable(UserError, RuntimeError):
    """The data cannot be found offline and cannot be downloaded."""


class ChecksumMismatch(UserError, RuntimeError):
    """A file differs from the published data set: results would not be comparable."""


def _verify(data_or_path: bytes | Path, checksum: str, what: str) -> None:
    algorithm, expected = checksum.split(":", 1)
    if isinstance(data_or_path, bytes):
        actual = hashlib.new(algorithm, data_or_path).hexdigest()
    else:
        actual = file_digest(data_or_path, algorithm)
    if actual != expected:
        raise ChecksumMismatch(
            f"{what}: {algorithm} is {actual}, expected {expected}; the file is not the "
            "published data set (replace it with the original)."
        )


@dataclass(frozen=True)
class RemoteFile:
    """A public data file, laid out under OODMOL_SOURCE_DIR as `relpath`.

    `checksum` is the digest of the file in that layout. Where the public download has
    another layout (other column names), `rename` maps its columns to ours and
    `download_checksum` checks the raw download; the conversion of a verified file is
    deterministic, so its output is trusted rather than compared byte for byte.
    """

    relpath: str
    url: str
    checksum: str
    download_checksum: str | None = None
    rename: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        inside(".", self.relpath, "a source file's relpath")  # relative, no '..'
        check_url(self.url, f"the URL of {self.relpath}")
        for checksum in filter(None, (self.checksum, self.download_checksum)):
            algorithm, _, digest = checksum.partition(":")
            if algorithm not in CHECKSUMS or not digest:
                raise UserError(
                    f"{self.relpath}: checksum {checksum[:80]!r} is not one of "
                    f"{', '.join(f'{a}:<hex>' for a in CHECKSUMS)}"
                )

    def resolve(self, data_dir: Path) -> Path:
        """Path of a verified copy: offline source dir first, then a cached download,
        each inside its folder whatever `relpath` says."""
        source_dir = os.environ.get(SOURCE_DIR_ENV)
        if source_dir:
            path = inside(source_dir, self.relpath, f"{SOURCE_DIR_ENV} file {self.relpath}")
            if not path.is_file():
                raise SourceUnavailable(
                    f"{self.relpath} not found in {SOURCE_DIR_ENV}={source_dir} "
                    f"(expected {path}); the public source is {self.url}"
                )
            _verify(path, self.checksum, str(path))
            return path
        path = inside(Path(data_dir) / "raw", self.relpath, f"download of {self.relpath}")
        if path.is_file():
            if not self.rename:
                _verify(path, self.checksum, str(path))
            return path
        self._download(path)
        return path

    def _download(self, path: Path) -> None:
        try:
            with urllib.request.urlopen(self.url, timeout=60) as response:
                data = response.read()
        except OSError as error:
            raise SourceUnavailable(
                f"could not download {self.url} ({error}). Without network, set "
                f"{SOURCE_DIR_ENV} to a folder holding {self.relpath}."
            ) from error
        _verify(data, self.download_checksum or self.checksum, self.url)
        if self.rename:
            data = _renamed_columns(data, self.rename)
        atomic_write_bytes(path, data)


def _renamed_columns(data: bytes, rename: dict[str, str]) -> bytes:
    """Keep and rename the columns in `rename`, in its order, keeping cells verbatim."""
    rows = csv.reader(io.StringIO(data.decode()))
    header = next(rows)
    keep = [header.index(old) for old in rename]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(list(rename.values()))
    for row in rows:
        writer.writerow([row[i] for i in keep] if row else [])
    return out.getvalue().encode()
