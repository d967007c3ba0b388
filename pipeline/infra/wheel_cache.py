"""Built wheels kept by content key, so an unchanged night builds nothing; an entry appears whole or not at all."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pipeline.infra.files import link_or_copy, sha256_of, write_atomically
from pipeline.infra.runtime_cache import stamp_used

ENTRY_VERSION = 1
ENTRY_RECORD = "entry.json"  # written last: a folder without it is no entry


@dataclass(frozen=True)
class BuiltWheel:
    """One wheel file with its digest."""

    filename: str
    sha256: str
    size: int


@dataclass(frozen=True)
class CacheEntry:
    """The wheels one build produced, and what went into it."""

    key: str
    wheels: tuple[BuiltWheel, ...]
    inputs: Mapping[str, Any]
    build_seconds: float
    directory: Path

    def paths(self) -> list[Path]:
        return [self.directory / wheel.filename for wheel in self.wheels]


def cache_key(inputs: Mapping[str, Any]) -> str:
    """The content key: a digest of everything that decides the wheels' bytes (sorted JSON)."""
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:24]


class WheelCache:
    """A folder per key holding the wheels and entry.json, written last through a rename."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def lookup(self, key: str) -> CacheEntry | None:
        """The entry for `key` if it is complete and every wheel still has its recorded digest, else None."""
        directory = self.root / key
        try:
            data = json.loads((directory / ENTRY_RECORD).read_text())
        except (OSError, ValueError):
            return None
        if data.get("version") != ENTRY_VERSION:
            return None
        wheels = tuple(BuiltWheel(**wheel) for wheel in data["wheels"])
        for wheel in wheels:
            path = directory / wheel.filename
            if not path.is_file() or path.stat().st_size != wheel.size or sha256_of(path) != wheel.sha256:
                return None  # damaged: treated as a miss, rebuilt and replaced
        stamp_used(directory)  # what the cache keeps longest (wheel_cache_budget)
        return CacheEntry(key, wheels, data["inputs"], data["build_seconds"], directory)

    def store(self, key: str, wheels: Sequence[Path], inputs: Mapping[str, Any], build_seconds: float) -> CacheEntry:
        """Copy the wheels in under a temporary name, describe them, then rename the folder into place."""
        self.root.mkdir(parents=True, exist_ok=True)
        staging = self.root / f".{key}.{os.getpid()}.tmp"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        built = []
        for wheel in sorted(wheels):
            shutil.copy2(wheel, staging / wheel.name)
            built.append(BuiltWheel(wheel.name, sha256_of(staging / wheel.name), wheel.stat().st_size))
        entry = {
            "version": ENTRY_VERSION,
            "key": key,
            "wheels": [asdict(wheel) for wheel in built],
            "inputs": dict(inputs),
            "build_seconds": round(build_seconds, 3),
        }
        write_atomically(staging / ENTRY_RECORD, json.dumps(entry, indent=2, sort_keys=True) + "\n")
        final = self.root / key
        shutil.rmtree(final, ignore_errors=True)  # a damaged entry of the same key
        staging.rename(final)
        return CacheEntry(key, tuple(built), dict(inputs), build_seconds, final)


def copy_out(entry: CacheEntry, destination: Path) -> list[Path]:
    """Place the entry's wheels in `destination` (hard links where the file system allows)."""
    destination.mkdir(parents=True, exist_ok=True)
    placed = []
    for source in entry.paths():
        target = destination / source.name
        target.unlink(missing_ok=True)
        link_or_copy(source, target)
        placed.append(target)
    return placed
