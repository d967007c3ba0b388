"""Generic file helpers: an atomic write, a file's sha256, a link or copy (no layout of any folder lives here)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_versioned(path: Path, version: int) -> Any:
    """A JSON record of ours, of the version this spark-nightly reads; ValueError otherwise (unreadable JSON too)."""
    data: Any = json.loads(path.read_text())
    found = data.get("version") if isinstance(data, dict) else None
    if found != version:
        raise ValueError(f"version {found!r}, this spark-nightly reads {version}")
    return data


def write_atomically(path: Path, text: str) -> None:
    """Write a file so that readers see the old content or the new, never half of it."""
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text)
    temporary.replace(path)


def link_or_copy(source: Path, target: Path) -> None:
    """`target` as a hard link to `source` where the filesystem allows one, else a copy: the same bytes either way,
    held once where they can be (the caller never writes to either in place)."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)
