"""A fetched night checked again before pip or docker sees it: manifest, lock and wheels agree, the lock is ours."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import TamperedAsset, UsageError
from pipeline.infra.files import sha256_of
from pipeline.infra.lock_grammar import LockLine, LockRefused, parse_lock
from pipeline.infra.safe_files import UnsafeName, check_name, is_regular_file, read_regular, shown
from pipeline.stages.release.publish import MANIFEST, MANIFEST_SCHEMA, parse_store_json

LOCK = "lock.txt"


@dataclass(frozen=True)
class VerifiedNight:
    """A fetched folder whose lock and wheels match its manifest, and whose lock holds only pinned files."""

    folder: Path
    manifest: dict[str, Any]
    lock: Path
    lines: tuple[LockLine, ...]
    wheels: tuple[Path, ...]


def verify_fetched(folder: Path) -> VerifiedNight:
    """Refuse a folder that is not exactly what fetch verified: a missing, edited or foreign lock or wheel."""
    manifest_path, lock = folder / MANIFEST, folder / LOCK
    for path in (manifest_path, lock):
        if not is_regular_file(path):
            raise UsageError(
                f"{path} is missing (or not a plain file): --from takes the folder spark-nightly fetch wrote, DEST/TAG"
            )
    manifest = parse_store_json(manifest_path, str(manifest_path), MANIFEST_SCHEMA)
    if (actual := sha256_of(lock)) != manifest["lock"]["sha256"]:
        raise TamperedAsset(f"{lock} has sha256 {actual}, {MANIFEST} says {manifest['lock']['sha256']}")
    try:
        lines = parse_lock(read_regular(lock).decode("utf-8"), str(lock))
    except (LockRefused, UnicodeDecodeError) as exc:
        raise TamperedAsset(str(exc)) from None
    pinned = {line.sha256 for line in lines}
    wheels = []
    for wheel in manifest["wheels"]:
        try:
            path = folder / check_name(wheel["name"], "wheel name")
        except UnsafeName as exc:
            raise TamperedAsset(f"{manifest_path}: {exc}") from None
        if not is_regular_file(path):
            raise TamperedAsset(f"{path} is missing or not a plain file; fetch the night again")
        if (actual := sha256_of(path)) != wheel["sha256"]:
            raise TamperedAsset(f"{path} has sha256 {actual}, {MANIFEST} says {wheel['sha256']}")
        if wheel["sha256"] not in pinned:
            raise TamperedAsset(f"{LOCK} does not pin {shown(wheel['name'])}, which {MANIFEST} lists")
        wheels.append(path)
    return VerifiedNight(folder, manifest, lock, lines, tuple(wheels))
