"""The wheel cache's share of the disk: least recently used first, never within a day, never a native build's."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import cast

from pipeline.infra.runtime_cache import USED_STAMP
from pipeline.infra.wheel_cache import WheelCache
from pipeline.infra.wheel_cache_budget import prune_wheels
from pipeline.nightly import NightRun, _stage_cache
from pipeline.places import CacheDir
from pipeline.progress import Progress
from pipeline.settings import resolve
from pipeline.stages.build.native_base import NativeBuilds

DAY = 24 * 3600
MIB = 1024**2


def entry(cache: CacheDir, name: str, days_ago: float) -> Path:
    """A wheel cache entry made by WheelCache itself, of 2 MiB, last used `days_ago`."""
    wheel = cache.root / "built" / f"{name}-1.0-py3-none-any.whl"
    wheel.parent.mkdir(parents=True, exist_ok=True)
    wheel.write_bytes(os.urandom(2 * MIB))
    stored = WheelCache(cache.wheels).store(name, [wheel], {"name": name}, 1.0)
    when = time.time() - days_ago * DAY
    os.utime(stored.directory / "entry.json", (when, when))
    return stored.paths()[0]


def kept(cache: CacheDir) -> list[str]:
    return sorted(p.name for p in cache.wheels.iterdir() if p.is_dir() and not p.name.startswith("."))


def test_the_least_recently_used_entries_go_first_and_never_one_used_within_a_day(tmp_path: Path) -> None:
    cache = CacheDir(tmp_path)
    for name, days_ago in (("old", 9), ("older", 12), ("recent", 3), ("tonight", 0.1)):
        entry(cache, name, days_ago)
    said: list[str] = []
    removed = prune_wheels(cache.root, 4.5 * MIB / 1024**3, say=said.append)  # room for two of the four
    assert removed == ["older", "old"] and kept(cache) == ["recent", "tonight"]
    assert "removed 2 entries" in said[0], said
    assert prune_wheels(cache.root, 1 / 1024**3) == ["recent"]  # past any budget, tonight's stays
    assert prune_wheels(cache.root, 0) == []  # 0 keeps every one


def test_a_lookup_stamps_the_entry_so_a_wheel_in_use_outlives_an_older_unused_one(tmp_path: Path) -> None:
    cache = CacheDir(tmp_path)
    entry(cache, "made-long-ago-used-tonight", 30)
    entry(cache, "made-last-week", 7)
    assert WheelCache(cache.wheels).lookup("made-long-ago-used-tonight") is not None
    assert (cache.wheels / "made-long-ago-used-tonight" / USED_STAMP).exists()
    assert prune_wheels(cache.root, 3 * MIB / 1024**3) == ["made-last-week"]


def test_a_native_build_later_nights_overlay_on_is_kept_past_the_budget(tmp_path: Path) -> None:
    cache = CacheDir(tmp_path)
    base = entry(cache, "native-base", 40)
    entry(cache, "overlay", 20)
    assert prune_wheels(cache.root, 1 / 1024**3, keep_wheels=[base]) == ["overlay"]
    assert base.is_file()


def test_the_nights_cache_stage_keeps_the_runners_native_builds(tmp_path: Path) -> None:
    cache = CacheDir(tmp_path)
    base = entry(cache, "native-base", 40)
    entry(cache, "overlay", 20)
    NativeBuilds(cache.native_builds).add("vllm", wheel=base, commit="a" * 40, digest="d", toolchain={"cuda": "13.0"})
    settings = resolve(
        settings_file=None,
        environ={},
        cli=[("paths.cache", str(tmp_path), "--set"), ("cache.wheels_max_gib", "1", "--set")],
    ).settings
    for name in ("native-base", "overlay"):  # 2 MiB each fits 1 GiB: make the budget bind by size on disk
        with (cache.wheels / name / "payload").open("wb") as payload:
            os.posix_fallocate(payload.fileno(), 0, int(0.6 * 1024**3))
    said = io.StringIO()
    _stage_cache(cast(NightRun, SimpleNamespace(settings=settings, progress=Progress(said, mode="plain"))))
    assert kept(cache) == ["native-base"], said.getvalue()
    assert "cache: wheels took" in said.getvalue() and "removed 1 entries" in said.getvalue()
