"""Identical large files of the cache's runtimes held once: each a hard link to one copy named by its content.

A runtime is a venv of its own, so every overlay on the same native base carries the same compiled extensions
(0.4 GB of `_C*.so` on the CPU) and every CUDA runtime the same torch and NVIDIA libraries (several GB): without
sharing, a culprit search of eight trials writes them eight times and a runner's disk fills within days. A runtime's
files are never changed once made (other inputs make another key, so another runtime; the bytecode its processes
write later are new files, each replacing none of these), so a hard link to a file of the
same content, size and mode is as good as a copy. The shared copy lives under the cache's `shared-files/`, named
`<sha256>-<mode>`, and goes when no runtime links it any more (`sweep_unlinked`, after runtimes are pruned).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from pipeline.infra.files import sha256_of

MIN_SHARED_BYTES = 1 << 20  # the bulk is in large files; small ones are not worth a digest each


@dataclass(frozen=True)
class Shared:
    """What one pass over a runtime found: its large files, and the bytes now held by a copy another one made."""

    files: int
    bytes_saved: int


def _large_files(root: Path) -> Iterator[Path]:
    for folder, _dirs, names in os.walk(root):
        for name in names:
            path = Path(folder, name)
            info = path.lstat()
            if stat.S_ISREG(info.st_mode) and info.st_size >= MIN_SHARED_BYTES:
                yield path


def _store_name(path: Path, info: os.stat_result) -> str:
    # the mode is the inode's, so it is part of what must match: a link cannot differ from its copy in it
    return f"{sha256_of(path)}-{stat.S_IMODE(info.st_mode):o}"


def share_identical_files(root: Path, store: Path) -> Shared:
    """Replace each large file under `root` by a link to the store's copy of the same content, adding those the
    store lacks. A file that cannot be linked (another filesystem, a copy swept meanwhile) stays as it is."""
    store.mkdir(parents=True, exist_ok=True)
    files = saved = 0
    for path in sorted(_large_files(root)):
        files += 1
        own = path.stat()
        kept = store / _store_name(path, own)
        # a temporary name, then a rename: the file is whole at its path at every moment, and a second maker
        # adding the same content at once only replaces a copy by an equal one
        with suppress(OSError):
            try:
                found = kept.stat()
            except FileNotFoundError:
                spare = store / f".{kept.name}.{os.getpid()}"
                os.link(path, spare)
                os.replace(spare, kept)
                continue
            if (found.st_dev, found.st_ino) == (own.st_dev, own.st_ino) or found.st_size != own.st_size:
                continue
            spare = path.with_name(f".{path.name}.shared.{os.getpid()}")
            os.link(kept, spare)
            os.replace(spare, path)
            saved += own.st_size
    return Shared(files, saved)


def sweep_unlinked(store: Path) -> int:
    """Remove the store's copies that no runtime links any more; returns the bytes freed."""
    freed = 0
    if not store.is_dir():
        return 0
    for path in store.iterdir():
        with suppress(OSError):
            info = path.lstat()
            if info.st_nlink == 1:
                path.unlink()
                freed += info.st_blocks * 512
    return freed
