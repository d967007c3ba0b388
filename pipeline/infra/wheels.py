"""Reading a wheel: its archive checked against RECORD, its metadata, and the native libraries inside."""

from __future__ import annotations

import base64
import csv
import email.parser
import hashlib
import io
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from pipeline.infra.base_env import normalize
from pipeline.infra.safe_files import shown

_SIGNATURES = (".jws", ".p7s")  # RECORD never lists its own signatures
NATIVE_SUFFIXES = (".so", ".cubin", ".fatbin")
# Caps that keep a hostile wheel from costing more than a real one: the largest real member (a FlashInfer JIT cache
# library) is well under 4 GiB, and real native code compresses 3-10x, never 200x.
MAX_MEMBER_BYTES = 4 * 1024**3
MAX_TOTAL_BYTES = 16 * 1024**3
MAX_RATIO = 200
_RATIO_FLOOR = 1024**2  # tiny members (an empty __init__.py) compress absurdly well and cost nothing
_COMPRESSIONS = {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED}  # what the wheel format and pip accept
# Everything reading a malformed archive can raise; inspection turns each into a refusal naming wheel and member.
READ_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, KeyError, ValueError, NotImplementedError, RuntimeError,
               EOFError, OSError, csv.Error, zlib.error)  # fmt: skip
# ELF e_machine by the architecture ending a platform tag (the ELF specification's values)
_ELF_MACHINES = {"aarch64": 183, "x86_64": 62, "i686": 3, "ppc64le": 21, "s390x": 22, "riscv64": 243}
_ELF_NAMES = {number: name for name, number in _ELF_MACHINES.items()}


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


def member_problems(archive: zipfile.ZipFile) -> list[str]:
    """What makes the archive unsafe to read or install, before any member is read: names outside the wheel,
    encryption, compressions pip refuses, and sizes past the caps."""
    problems = []
    total = 0
    for info in archive.infolist():
        name = shown(info.filename)
        parts = info.filename.replace("\\", "/").split("/")
        if info.filename.startswith(("/", "\\")) or ".." in parts or (parts and parts[0].endswith(":")):
            problems.append(f"{name}: not a relative path inside the wheel")
        elif name != info.filename:
            problems.append(f"{name}: the member name holds control characters")
        if info.flag_bits & 0x1:
            problems.append(f"{name}: encrypted")
        if info.compress_type not in _COMPRESSIONS:
            problems.append(f"{name}: compression method {info.compress_type} (a wheel is stored or deflated)")
        if info.file_size > MAX_MEMBER_BYTES:
            problems.append(f"{name}: {info.file_size} bytes unpacked, over the {MAX_MEMBER_BYTES}-byte cap")
        elif info.file_size > _RATIO_FLOOR and info.file_size > MAX_RATIO * max(info.compress_size, 1):
            problems.append(
                f"{name}: {info.file_size} bytes from {info.compress_size} compressed (over {MAX_RATIO}:1, a zip bomb?)"
            )
        total += info.file_size
    if total > MAX_TOTAL_BYTES:
        problems.append(f"{total} bytes unpacked in all, over the {MAX_TOTAL_BYTES}-byte cap")
    return problems


def elf_problems(archive: zipfile.ZipFile, platform_tag: str) -> list[str]:
    """Native libraries (.so) that are not ELF, or are ELF for another machine than the platform tag names."""
    wanted = next((number for arch, number in _ELF_MACHINES.items() if platform_tag.endswith(arch)), None)
    problems = []
    for info in archive.infolist():
        base = Path(info.filename).name
        if info.is_dir() or not (base.endswith(".so") or ".so." in base):
            continue
        with archive.open(info) as member:
            header = member.read(20)
        name = shown(info.filename)
        if len(header) < 20 or header[:4] != b"\x7fELF":
            problems.append(f"{name}: named like a shared library but not an ELF file")
            continue
        machine = int.from_bytes(header[18:20], "little" if header[5] == 1 else "big")
        if wanted is not None and machine != wanted:
            found = _ELF_NAMES.get(machine, f"ELF machine {machine}")
            problems.append(f"{name}: built for {found}, but the wheel is tagged {platform_tag}")
    return problems


def check_archive(wheel: Path) -> ArchiveCheck:
    """Read every member (which checks its CRC) and compare it with its RECORD row, both ways; an unsafe archive
    (see member_problems) is refused before any member is read."""
    problems: list[str] = []
    try:
        with zipfile.ZipFile(wheel) as archive:
            if unsafe := member_problems(archive):
                return ArchiveCheck(0, tuple(unsafe))
            record_name = f"{_dist_info(archive)}/RECORD"
            rows = record_rows(archive.read(record_name).decode("utf-8"))
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
    except READ_ERRORS as exc:
        return ArchiveCheck(0, (f"unreadable archive: {shown(str(exc))[:300]}",))
    return ArchiveCheck(len(names), tuple(problems))


def native_infos(archive: zipfile.ZipFile) -> list[zipfile.ZipInfo]:
    """The native libraries (.so, .cubin, .fatbin) of an open wheel."""
    return [info for info in archive.infolist() if not info.is_dir() and _is_native(info.filename)]


def extract_to(archive: zipfile.ZipFile, info: zipfile.ZipInfo, target: Path) -> None:
    """One member's bytes into a new file `target` (named by the caller, so no member name can escape)."""
    with archive.open(info) as source, target.open("xb") as sink:
        while block := source.read(1 << 20):
            sink.write(block)


def _is_native(name: str) -> bool:
    base = Path(name).name
    return base.endswith(NATIVE_SUFFIXES) or ".so." in base


def _dist_info(archive: zipfile.ZipFile) -> str:
    folders = {name.split("/", 1)[0] for name in archive.namelist() if name.split("/", 1)[0].endswith(".dist-info")}
    if len(folders) != 1:
        raise ValueError(f"expected one .dist-info folder, found {len(folders)}")
    return folders.pop()


def record_rows(text: str) -> dict[str, tuple[str, str]]:
    """A RECORD file's rows: each path with its digest and size as written (empty where a row has none)."""
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
