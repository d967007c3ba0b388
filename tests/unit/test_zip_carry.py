"""Zip members carried as they are stored: the same content read back, the same compressed bytes, a valid archive."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

from pipeline.errors import SparkNightlyError
from pipeline.infra import zip_carry
from pipeline.infra.zip_carry import carry, same_stored, stored_bytes

# a native's stand-in: repetitive enough to compress, with bytes no level leaves alone
CONTENT = b"\x7fELF" + os.urandom(4096) + b"\x00" * 200_000 + bytes(range(256)) * 64


def _source(path: Path, *, level: int = 9, method: int = zipfile.ZIP_DEFLATED) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(zipfile.ZipInfo("pkg/__init__.py"), b"X = 1\n", compress_type=zipfile.ZIP_DEFLATED)
        archive.writestr(zipfile.ZipInfo("pkg/_C.so"), CONTENT, compress_type=method, compresslevel=level)
    return path


def _carried(source: Path, target: Path, *, before: bytes = b"Y = 2\n") -> Path:
    with zipfile.ZipFile(source) as theirs, zipfile.ZipFile(target, "w") as ours:
        ours.writestr(zipfile.ZipInfo("pkg/a.py"), before, compress_type=zipfile.ZIP_DEFLATED)
        info = zipfile.ZipInfo("pkg/_C.so", date_time=(2026, 11, 1, 0, 0, 0))
        info.external_attr = 0o644 << 16
        carry(ours, theirs, "pkg/_C.so", info)
        ours.writestr(zipfile.ZipInfo("pkg/z.py"), b"Z = 3\n", compress_type=zipfile.ZIP_DEFLATED)
    return target


@pytest.mark.parametrize("method", [zipfile.ZIP_DEFLATED, zipfile.ZIP_STORED])
def test_a_carried_member_reads_back_as_the_source_holds_it_in_a_valid_archive(tmp_path: Path, method: int) -> None:
    source = _source(tmp_path / "base.whl", method=method)
    target = _carried(source, tmp_path / "overlay.whl")
    with zipfile.ZipFile(target) as ours, zipfile.ZipFile(source) as theirs:
        assert ours.testzip() is None  # every member's CRC checked against its bytes
        assert ours.read("pkg/_C.so") == CONTENT
        assert ours.namelist() == ["pkg/a.py", "pkg/_C.so", "pkg/z.py"]
        assert (ours.read("pkg/a.py"), ours.read("pkg/z.py")) == (b"Y = 2\n", b"Z = 3\n")
        carried = ours.getinfo("pkg/_C.so")
        assert (carried.compress_type, carried.file_size, carried.date_time) == (
            method,
            len(CONTENT),
            (2026, 11, 1, 0, 0, 0),
        )
        assert stored_bytes(ours, "pkg/_C.so") == stored_bytes(theirs, "pkg/_C.so")  # not compressed again
        assert same_stored(ours, theirs, "pkg/_C.so")
    # each local header says what the central directory says (a reader of a stream trusts them alone)
    raw = target.read_bytes()
    with zipfile.ZipFile(target) as ours:
        for info in ours.infolist():
            fields = zip_carry._LOCAL_HEADER.unpack_from(raw, info.header_offset)
            assert fields[0] == b"PK\x03\x04" and fields[2] & 0x8 == 0, info  # no data descriptor follows
            assert (fields[3], fields[6], fields[7], fields[8]) == (
                info.compress_type,
                info.CRC,
                info.compress_size,
                info.file_size,
            ), info


def test_the_same_content_compressed_otherwise_is_not_the_same_stored_bytes(tmp_path: Path) -> None:
    tight = _source(tmp_path / "tight.whl", level=9)
    loose = _source(tmp_path / "loose.whl", level=1)
    with zipfile.ZipFile(tight) as one, zipfile.ZipFile(loose) as other:
        assert one.read("pkg/_C.so") == other.read("pkg/_C.so")
        assert not same_stored(one, other, "pkg/_C.so")  # the caller then compares the content itself


def test_a_member_too_large_to_carry_is_compressed_again_and_still_reads_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(zip_carry, "_LARGEST_CARRIED", 1000)
    source = _source(tmp_path / "base.whl")
    target = _carried(source, tmp_path / "overlay.whl")
    with zipfile.ZipFile(target) as ours, zipfile.ZipFile(source) as theirs:
        assert ours.testzip() is None and ours.read("pkg/_C.so") == CONTENT
        assert not same_stored(ours, theirs, "pkg/_C.so")


def test_a_member_whose_local_header_is_not_where_the_directory_says_is_refused(tmp_path: Path) -> None:
    source = _source(tmp_path / "base.whl")
    with zipfile.ZipFile(source) as archive:
        archive.getinfo("pkg/_C.so").header_offset += 1
        with pytest.raises(SparkNightlyError, match="has no local file header"):
            stored_bytes(archive, "pkg/_C.so")
