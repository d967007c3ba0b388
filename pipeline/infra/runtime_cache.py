"""The runtimes' share of the disk: each use stamped, the least recently used removed past a budget.

Every built night and every culprit trial or bisection step makes a runtime of its own (an overlay is about 0.7 GB
on the CPU, a CUDA runtime 10 GB or more), so a runner that keeps them all fills its disk within weeks. At the end of
a night the runtimes beyond `cache.runtimes_max_gib` go, least recently used first. Never one used in the last day
(tonight's, a shard's, the last good build's that tonight's pairs booted), never one a maker holds, and never a
companion whose overlay stays (the overlay loads the companion's packages from its folder). A removed runtime's
own compile folder goes with it.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.infra.files import write_atomically
from pipeline.infra.shared_files import sweep_unlinked
from pipeline.places import CacheDir
from pipeline.progress import Say, quiet

USED_STAMP = "last-used"
DISK_RECORD = "disk.json"  # in a complete runtime: what it takes on disk, by runtime_size
RECENT_S = 24 * 3600  # a runtime used within this long is tonight's or a shard's: never removed
GIB = 1024**3


def stamp_used(root: Path) -> None:
    """Note that a night used this runtime now (best effort: a read-only cache is still usable)."""
    with suppress(OSError):
        (root / USED_STAMP).touch()


@dataclass(frozen=True)
class CachedFolder:
    """One folder under the cache's runtimes/ (or an entry of its wheel cache), as pruning sees it."""

    name: str
    size_bytes: int
    last_used: float  # seconds since the epoch
    companion: str | None  # the runtime an overlay is layered over
    key: str | None = None  # a runtime's content key, which names its own compile folder (CacheDir.runtime_compile)


def disk_size(root: Path) -> int:
    """Bytes the folder takes on disk, a file linked twice within it counted once. A file it shares through the
    store (infra/shared_files.py) counts its share: linked n times, one link the store's, 1/(n-1) of it."""
    return _share_of(os.path.join(folder, name) for folder, _dirs, files in os.walk(root) for name in files)


def _share_of(paths: Iterable[str | Path]) -> int:
    """The bytes these files take on disk, as `disk_size` counts them: each file once, a linked one by its share."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for path in paths:
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if (info.st_dev, info.st_ino) not in seen:
            seen.add((info.st_dev, info.st_ino))
            total += info.st_blocks * 512 // max(1, info.st_nlink - 1)
    return total


def runtime_size(root: Path) -> int:
    """`disk_size` of a runtime, read from its disk record once it is complete (made then, or by the first pruning
    after): a runtime's files never change but for the bytecode its processes write at their first imports (a few
    MB), so only the few it shares with others (whose share moves as runtimes come and go) are looked at again,
    where walking an overlay's 7,000 files and a companion's 60,000 took seconds at every night's end. The small
    records written into it after (its stamp, smoke's) are left out."""
    try:
        made = (root / "runtime.json").stat().st_mtime_ns
    except OSError:  # being made, a making cut short, or renamed away by another night's pruning: walked as it is
        return disk_size(root)
    try:
        record = json.loads((root / DISK_RECORD).read_text())
        own, shared = int(record["own"]), [str(path) for path in record["shared"]]
        recorded = record["made"] == made  # a record of an earlier making under the same name is walked again
    except (OSError, ValueError, KeyError, TypeError):
        recorded = False
    if not recorded:
        own, shared = _record_disk(root, made)
    return own + _share_of(root / relative for relative in shared)  # their shares tonight


def _record_disk(root: Path, made: int) -> tuple[int, list[str]]:
    """Walk a complete runtime once (its runtime.json of `made`): the bytes of its files no other folder links, and
    the files it shares."""
    own, shared = 0, []
    for folder, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if info.st_nlink > 1:
                shared.append(os.path.relpath(path, root))
            else:
                own += info.st_blocks * 512
    with suppress(OSError):  # a read-only cache, or a runtime removed meanwhile: walked again next time
        write_atomically(root / DISK_RECORD, json.dumps({"made": made, "own": own, "shared": shared}) + "\n")
    return own, shared


def last_used(root: Path, record: str = "runtime.json") -> float:
    """When a night last used the folder: its stamp, else when its record was written (its making)."""
    times = []
    for name in (USED_STAMP, record):
        with suppress(OSError):
            times.append((root / name).stat().st_mtime)
    return max(times) if times else root.stat().st_mtime


def runtime_record(root: Path) -> dict[str, Any]:
    """A runtime's runtime.json as written (its key, lock, companion or base environment); empty while it is made,
    or where it is not one."""
    try:
        meta = json.loads((root / "runtime.json").read_text())
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def _cached_runtime(root: Path) -> CachedFolder:
    """One runtime folder as pruning sees it; its companion and key from runtime.json (none while it is made)."""
    meta = runtime_record(root)
    companion, key = meta.get("companion"), meta.get("key")
    return CachedFolder(
        root.name,
        runtime_size(root),
        last_used(root),
        companion if isinstance(companion, str) else None,
        key if isinstance(key, str) and key else None,
    )


def cached_runtimes(runtimes_dir: Path) -> list[CachedFolder]:
    """Every runtime folder (complete or not) under `runtimes_dir`; removal leftovers are not runtimes."""
    if not runtimes_dir.is_dir():
        return []
    return [
        _cached_runtime(root)
        for root in sorted(runtimes_dir.iterdir())
        if root.is_dir() and not root.name.startswith(".")
    ]


def layered_under(name: str, runtimes: Sequence[CachedFolder]) -> list[str]:
    """What a runtime is layered over, nearest first (an overlay over FlashInfer's layer over the companion)."""
    by_name = {r.name: r for r in runtimes}
    found: list[str] = []
    companion = by_name[name].companion if name in by_name else None
    while companion is not None and companion not in found:
        found.append(companion)
        companion = by_name[companion].companion if companion in by_name else None
    return found


def eviction_plan(
    runtimes: Sequence[CachedFolder], budget_bytes: int, now: float, keep: frozenset[str] = frozenset()
) -> list[CachedFolder]:
    """The runtimes to remove, in order, so the rest fit the budget: least recently used first, where a companion
    counts as used whenever one of its overlays was (through every layer between), and goes only after them. None
    used within RECENT_S, none in `keep` (a cell's last confirmed build, which pairs boot on any later night) nor
    anything one of those is layered over."""
    by_name = {r.name: r for r in runtimes}

    def under(name: str) -> list[str]:
        return layered_under(name, runtimes)

    kept = keep | {below for name in keep for below in under(name)}
    used = {r.name: r.last_used for r in runtimes}
    for runtime in runtimes:  # an overlay's use is the use of everything it is layered over
        for below in under(runtime.name):
            if below in used:
                used[below] = max(used[below], runtime.last_used)
    # what others are layered over leaves after them: an overlay, then FlashInfer's layer, then the companion
    layered_over = {name: sum(name in under(r.name) for r in runtimes) for name in by_name}
    total = sum(r.size_bytes for r in runtimes)
    plan: list[CachedFolder] = []
    for name in sorted(by_name, key=lambda n: (used[n], layered_over[n], n)):
        if total <= budget_bytes or used[name] > now - RECENT_S:
            break
        if name in kept:
            continue
        plan.append(by_name[name])
        total -= by_name[name].size_bytes
    return plan


@contextmanager
def _unless_busy(root: Path) -> Iterator[bool]:
    """True while this process holds the runtime's maker lock; False when a maker holds it now."""
    lock = root.parent / f"{root.name}.lock"
    with lock.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def remove_folder(root: Path) -> None:
    """Remove a cached folder: renamed out of its place first, so a crash mid-way leaves no folder that looks whole
    (`clear_removal_leftovers` finishes such a removal)."""
    doomed = root.parent / f".removing-{root.name}-{os.getpid()}"
    root.rename(doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def clear_removal_leftovers(folder: Path) -> None:
    """Finish the removals of `remove_folder` that a crash cut short."""
    for leftover in folder.glob(".removing-*"):
        shutil.rmtree(leftover, ignore_errors=True)


def remove_runtime(root: Path) -> bool:
    """Remove one runtime unless a maker holds it now."""
    with _unless_busy(root) as free:
        if not free:
            return False
        remove_folder(root)
    (root.parent / f"{root.name}.lock").unlink(missing_ok=True)
    return True


def prune_runtimes(
    cache_dir: Path,
    budget_gib: float,
    *,
    keep: frozenset[str] = frozenset(),
    say: Say = quiet,
    now: float | None = None,
) -> list[str]:
    """Remove the least recently used runtimes past the budget (0: keep every one), none named in `keep`; returns
    the removed names."""
    cache = CacheDir(cache_dir)
    runtimes_dir = cache.runtimes
    clear_removal_leftovers(runtimes_dir)
    clear_removal_leftovers(cache.compile)
    if budget_gib <= 0:
        return []
    runtimes = cached_runtimes(runtimes_dir)
    total = sum(r.size_bytes for r in runtimes)
    plan = eviction_plan(runtimes, int(budget_gib * GIB), time.time() if now is None else now, keep)
    if not plan:
        say(f"cache: runtimes take {total / GIB:.1f} GiB of {budget_gib:g} GiB; none removed")
        return []
    removed: list[CachedFolder] = []
    spared: set[str] = set()  # what a runtime a maker holds now is layered over stays with it
    for runtime in plan:
        if runtime.name in spared:
            continue
        if remove_runtime(runtimes_dir / runtime.name):
            removed.append(runtime)
            # what its servers wrote (on a Spark a build's torch.compile graphs, GBs) is of no use without it; the
            # kernels' folders, shared by every runtime with the same files but vLLM, stay
            compiled = cache.runtime_compile(runtime.key) if runtime.key else None
            if compiled is not None and compiled.is_dir():
                remove_folder(compiled)
        else:
            spared |= set(layered_under(runtime.name, runtimes))
    sweep_unlinked(cache.shared_files)  # what only the removed ones linked
    freed = sum(r.size_bytes for r in removed)
    busy = f"; {len(plan) - len(removed)} kept, in use by a maker or under one" if len(removed) < len(plan) else ""
    oldest = min((r.last_used for r in removed), default=0.0)
    since = time.strftime("%Y-%m-%d", time.gmtime(oldest))
    say(
        f"cache: runtimes took {total / GIB:.1f} GiB of {budget_gib:g} GiB; removed {len(removed)} "
        f"({freed / GIB:.1f} GiB), least recently used first (the oldest last used {since}){busy}"
    )
    return [r.name for r in removed]
