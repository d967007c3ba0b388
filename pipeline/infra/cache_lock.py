"""One maker at a time for a cache entry: shards of a night on one host, or parallel tests, share the cache."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def exclusive(entry: Path) -> Iterator[None]:
    """Hold `<entry>.lock` while checking and making `entry`; a second maker waits, then finds it made.

    flock is released by the kernel when the holder dies, so a crashed maker never blocks the next night.
    """
    entry.parent.mkdir(parents=True, exist_ok=True)
    with (entry.parent / f"{entry.name}.lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
