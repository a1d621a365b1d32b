"""Source files: checked against their published checksums, converted column by column
without touching a cell."""

from __future__ import annotations

import hashlib
import io
import urllib.request
from pathlib import Path

import pytest

from oodmol.data.sources.fetch import (
    SOURCE_DIR_ENV,
    ChecksumMismatch,
    RemoteFile,
    SourceUnavailable,
    _renamed_columns,
)

URL = "https://example.org/data/set.csv"
CONTENT = b"smiles,target\nCCO,1.5\n"


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@pytest.fixture
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An OODMOL_SOURCE_DIR holding set/set.csv."""
    folder = tmp_path / "sources"
    (folder / "set").mkdir(parents=True)
    (folder / "set" / "set.csv").write_bytes(CONTENT)
    monkeypatch.setenv(SOURCE_DIR_ENV, str(folder))
    return folder


def test_offline_file_with_the_right_checksum_is_used(offline: Path, tmp_path: Path) -> None:
    remote = RemoteFile("set/set.csv", URL, _sha256(CONTENT))
    assert remote.resolve(tmp_path / "data") == offline / "set" / "set.csv"


def test_offline_file_with_a_wrong_checksum_is_refused(offline: Path, tmp_path: Path) -> None:
    """A file that is not the published one raises, naming the file and both digests."""
    wrong = _sha256(b"something else")
    remote = RemoteFile("set/set.csv", URL, wrong)
    with pytest.raises(ChecksumMismatch) as error:
        remote.resolve(tmp_path / "data")
    message = str(error.value)
    assert str(offline / "set" / "set.csv") in message
    assert wrong.split(":")[1] in message
    assert hashlib.sha256(CONTENT).hexdigest() in message


def test_offline_file_missing_names_the_env_var_and_url(offline: Path, tmp_path: Path) -> None:
    remote = RemoteFile("set/other.csv", URL, _sha256(CONTENT))
    with pytest.raises(SourceUnavailable, match=rf"{SOURCE_DIR_ENV}=.*{URL}"):
        remote.resolve(tmp_path / "data")


def test_renamed_columns_keep_cells_verbatim() -> None:
    """Columns are kept and renamed in the mapping's order; cells are copied character
    for character (no float reformatting, whitespace kept), quoted cells stay one cell,
    and blank lines stay so that line numbers, hence molecule ids, do not move."""
    raw = (
        b"CMPD_CHEMBLID,exp,smiles\n"
        b"CHEMBL1,3.540,Cn1cnc2ccccc12\n"
        b'CHEMBL2,-1.18,"C(=O)O,odd"\n'
        b"\n"
        b"CHEMBL3, 0.50 ,CCO\n"
        b"CHEMBL4,1e-3,C[C@H](N)C(=O)O\n"
    )
    out = _renamed_columns(raw, {"smiles": "smiles", "exp": "target"})
    assert out == (
        b"smiles,target\n"
        b"Cn1cnc2ccccc12,3.540\n"
        b'"C(=O)O,odd",-1.18\n'
        b"\n"
        b"CCO, 0.50 \n"
        b"C[C@H](N)C(=O)O,1e-3\n"
    )


class _Response(io.BytesIO):
    def __enter__(self) -> _Response:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def test_download_is_checked_then_converted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without an offline copy the download is verified by its own checksum, converted,
    and stored under data_dir/raw; a download with the wrong checksum stores nothing."""
    raw = b"CMPD_CHEMBLID,exp,smiles\nCHEMBL1,3.540,CCO\n"
    monkeypatch.delenv(SOURCE_DIR_ENV, raising=False)
    monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout: _Response(raw))
    converted = b"smiles,target\nCCO,3.540\n"
    remote = RemoteFile(
        "set/set.csv",
        URL,
        _sha256(converted),
        download_checksum="md5:" + hashlib.md5(raw).hexdigest(),
        rename={"smiles": "smiles", "exp": "target"},
    )
    path = remote.resolve(tmp_path / "data")
    assert path == tmp_path / "data" / "raw" / "set" / "set.csv"
    assert path.read_bytes() == converted

    bad = RemoteFile("set/bad.csv", URL, _sha256(converted), download_checksum="md5:" + "0" * 32)
    with pytest.raises(ChecksumMismatch, match=URL):
        bad.resolve(tmp_path / "data")
    assert not (tmp_path / "data" / "raw" / "set" / "bad.csv").exists()
