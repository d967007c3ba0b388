"""The wheel cache's share of the disk: its entries least recently used removed past `cache.wheels_max_gib`.

Every build adds an entry (a CPU overlay's wheel about 0.15 GB, a CUDA vLLM wheel 0.5 GB or more), every culprit
trial and bisection step too, so a runner that keeps them all fills its disk within weeks. At the end of a night the
entries beyond the budget go, least recently used first (a lookup stamps its entry), as the runtimes do
(runtime_cache.py): never one used within a day, and never one whose wheel a later night overlays on (the runner's
own native builds, named by the caller). A run's folder and a release keep their own links to the wheels they hold,
so removing an entry costs a later night a rebuild, never evidence.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from pathlib import Path

from pipeline.infra.runtime_cache import (
    GIB,
    CachedFolder,
    clear_removal_leftovers,
    disk_size,
    eviction_plan,
    last_used,
    remove_folder,
)
from pipeline.infra.shared_files import sweep_unlinked
from pipeline.infra.wheel_cache import ENTRY_RECORD
from pipeline.places import CacheDir
from pipeline.progress import Say, quiet


def cached_entries(wheels_dir: Path) -> list[CachedFolder]:
    """Every entry folder of the wheel cache (staging and removal leftovers start with a dot)."""
    if not wheels_dir.is_dir():
        return []
    return [
        CachedFolder(root.name, disk_size(root), last_used(root, ENTRY_RECORD), None)
        for root in sorted(wheels_dir.iterdir())
        if root.is_dir() and not root.name.startswith(".")
    ]


def prune_wheels(
    cache_dir: Path,
    budget_gib: float,
    *,
    keep_wheels: Collection[Path] = (),
    say: Say = quiet,
    now: float | None = None,
) -> list[str]:
    """Remove the least recently used entries past the budget (0: keep every one), none holding a wheel of
    `keep_wheels`; returns the removed keys."""
    cache = CacheDir(cache_dir)
    clear_removal_leftovers(cache.wheels)
    if budget_gib <= 0:
        return []
    entries = cached_entries(cache.wheels)
    total = sum(e.size_bytes for e in entries)
    keep = frozenset(path.parent.name for path in keep_wheels if path.parent.parent == cache.wheels)
    plan = eviction_plan(entries, int(budget_gib * GIB), time.time() if now is None else now, keep)
    if not plan:
        say(f"cache: wheels take {total / GIB:.1f} GiB of {budget_gib:g} GiB; none removed")
        return []
    for entry in plan:
        remove_folder(cache.wheels / entry.name)
    # a wheel an overlay runtime installed from is in the store too; once that runtime and this entry are gone,
    # the store's link is its last
    sweep_unlinked(cache.shared_files)
    freed = sum(e.size_bytes for e in plan)
    since = time.strftime("%Y-%m-%d", time.gmtime(min(e.last_used for e in plan)))
    say(
        f"cache: wheels took {total / GIB:.1f} GiB of {budget_gib:g} GiB; removed {len(plan)} entries "
        f"({freed / GIB:.1f} GiB), least recently used first (the oldest last used {since})"
    )
    return [e.name for e in plan]
