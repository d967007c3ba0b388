"""Real wheel archives for tests: METADATA, WHEEL and a RECORD of sha256 hashes, as a build backend writes them."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(
    directory: Path,
    name: str,
    version: str,
    files: Mapping[str, bytes],
    *,
    requires: Sequence[str] = (),
    platform: str = "linux_aarch64",
    metadata_name: str | None = None,
) -> Path:
    """Write `name-version-py3-none-platform.whl` holding `files` under the package folder."""
    stem = name.replace("-", "_")
    dist_info = f"{stem}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {metadata_name or name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {line}\n" for line in requires)
    members = {f"{stem}/{path}": data for path, data in files.items()}
    members[f"{dist_info}/METADATA"] = metadata.encode()
    members[f"{dist_info}/WHEEL"] = f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: py3-none-{platform}\n".encode()
    record = "".join(f"{path},{_digest(data)},{len(data)}\n" for path, data in members.items())
    record += f"{dist_info}/RECORD,,\n"
    members[f"{dist_info}/RECORD"] = record.encode()
    wheel = directory / f"{stem}-{version}-py3-none-{platform}.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, data in members.items():
            archive.writestr(path, data)
    return wheel


def replace_member(wheel: Path, member_suffix: str, data: bytes) -> None:
    """Rewrite one member without updating RECORD: what a corrupted or tampered upload looks like."""
    with zipfile.ZipFile(wheel) as archive:
        members = {info.filename: archive.read(info) for info in archive.infolist()}
    target = next(name for name in members if name.endswith(member_suffix))
    members[target] = data
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, content in members.items():
            archive.writestr(path, content)
