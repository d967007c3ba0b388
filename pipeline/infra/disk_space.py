"""A full disk is the host's, never the build's nor a bug of ours: it is told as such, naming where space ran out.

A night writes runs, history, wheels and runtimes; when one of those disks fills, the write fails with ENOSPC (or
EDQUOT past a quota) wherever it happens to be. That error says nothing of which folder was full, so the night's
folders are measured and the fullest named, with what frees space.
"""

from __future__ import annotations

import errno
import shutil
from collections.abc import Iterable
from contextlib import suppress
from pathlib import Path

from pipeline.errors import HostOutOfSpace

FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
MIB = 1024**2


def is_disk_full(exc: BaseException) -> bool:
    """Whether an exception, or one it was raised from, is a write that found its disk full."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in FULL_ERRNOS:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _free_bytes(path: Path) -> int | None:
    for folder in (path, *path.parents):  # a folder not made yet lives on its nearest parent's disk
        with suppress(OSError):
            return shutil.disk_usage(folder).free
    return None


def out_of_space(exc: BaseException, places: Iterable[tuple[str, Path]]) -> HostOutOfSpace:
    """The error to report for a full disk: each of the night's folders with its free space, the fullest first."""
    measured = [(free, name, path) for name, path in places if (free := _free_bytes(path)) is not None]
    measured.sort(key=lambda item: item[0])
    free_text = "; ".join(f"{name} {path}: {free / MIB:,.0f} MiB free" for free, name, path in measured)
    return HostOutOfSpace(f"a disk of this host is full ({exc}): {free_text or 'no folder could be measured'}")
