"""Reading a wheel: its archive checked against RECORD, its metadata, and the native libraries inside."""

from __future__ import annotations

import base64
import csv
import email.parser
import hashlib
import io
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pipeline.infra.runtime import normalize

_SIGNATURES = (".jws", ".p7s")  # RECORD never lists its own signatures
NATIVE_SUFFIXES = (".so", ".cubin", ".fatbin")


@dataclass(frozen=True)
class WheelMetadata:
    """What a wheel says about itself (METADATA and its file name)."""

    name: str  # normalised
    version: str
    filename_name: str
    filename_version: str
    platform_tag: str
    requires: tuple[str, ...]


@dataclass(frozen=True)
class ArchiveCheck:
    """The archive read end to end: every member's CRC and RECORD hash."""

    members: int
    problems: tuple[str, ...]


def read_metadata(wheel: Path) -> WheelMetadata:
    """METADATA from the .dist-info folder, and the name, version and platform in the file name."""
    parts = wheel.name.removesuffix(".whl").split("-")
    if len(parts) not in {5, 6} or not wheel.name.endswith(".whl"):
        raise ValueError(f"{wheel.name} is not a wheel file name (name-version[-build]-python-abi-platform.whl)")
    with zipfile.ZipFile(wheel) as archive:
        text = archive.read(f"{_dist_info(archive)}/METADATA").decode("utf-8")
    message = email.parser.Parser().parsestr(text, headersonly=True)
    return WheelMetadata(
        name=normalize(message.get("Name", "")),
        version=message.get("Version", ""),
        filename_name=normalize(parts[0]),
        filename_version=parts[1],
        platform_tag=parts[-1],
        requires=tuple(message.get_all("Requires-Dist") or ()),
    )


def check_archive(wheel: Path) -> ArchiveCheck:
    """Read every member (which checks its CRC) and compare it with its RECORD row, both ways."""
    problems: list[str] = []
    try:
        with zipfile.ZipFile(wheel) as archive:
            record_name = f"{_dist_info(archive)}/RECORD"
            rows = _record_rows(archive.read(record_name).decode("utf-8"))
            rows.pop(record_name, None)  # RECORD lists itself without a hash
            names = [info.filename for info in archive.infolist() if not info.is_dir()]
            for name in names:
                if name == record_name or name.endswith(_SIGNATURES):
                    continue
                expected = rows.pop(name, None)
                actual = _record_hash(archive, name)
                if expected is None:
                    problems.append(f"{name}: in the archive but not in RECORD")
                elif expected[0] != actual:
                    problems.append(f"{name}: RECORD hash {expected[0] or '(none)'} but the file hashes to {actual}")
                elif expected[1] and int(expected[1]) != archive.getinfo(name).file_size:
                    problems.append(
                        f"{name}: RECORD size {expected[1]} but the file has {archive.getinfo(name).file_size}"
                    )
            problems.extend(f"{name}: listed in RECORD but missing from the archive" for name in rows)
    except (zipfile.BadZipFile, KeyError, OSError, ValueError) as exc:
        return ArchiveCheck(0, (f"unreadable archive: {exc}",))
    return ArchiveCheck(len(names), tuple(problems))


@contextmanager
def extracted_natives(wheel: Path, into: Path) -> Iterator[list[tuple[str, Path]]]:
    """Extract the native libraries (.so, .cubin, .fatbin) of a wheel, yielding (member name, extracted path)."""
    found: list[tuple[str, Path]] = []
    with zipfile.ZipFile(wheel) as archive:
        for index, info in enumerate(archive.infolist()):
            if info.is_dir() or not _is_native(info.filename):
                continue
            target = into / f"{index:05d}-{Path(info.filename).name}"  # flat: no member name can escape `into`
            with archive.open(info) as source, target.open("wb") as sink:
                while block := source.read(1 << 20):
                    sink.write(block)
            found.append((info.filename, target))
    try:
        yield found
    finally:
        for _, path in found:
            path.unlink(missing_ok=True)


def _is_native(name: str) -> bool:
    base = Path(name).name
    return base.endswith(NATIVE_SUFFIXES) or ".so." in base


def _dist_info(archive: zipfile.ZipFile) -> str:
    folders = {name.split("/", 1)[0] for name in archive.namelist() if name.split("/", 1)[0].endswith(".dist-info")}
    if len(folders) != 1:
        raise ValueError(f"expected one .dist-info folder, found {len(folders)}")
    return folders.pop()


def _record_rows(text: str) -> dict[str, tuple[str, str]]:
    rows: dict[str, tuple[str, str]] = {}
    for row in csv.reader(io.StringIO(text)):
        if row:
            name, digest, size = [*row, "", ""][:3]
            rows[name] = (digest, size)
    return rows


def _record_hash(archive: zipfile.ZipFile, name: str) -> str:
    digest = hashlib.sha256()
    with archive.open(name) as member:
        while block := member.read(1 << 20):
            digest.update(block)
    return "sha256=" + base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()
