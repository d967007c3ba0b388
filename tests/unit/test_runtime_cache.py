"""The runtimes' share of the disk: least recently used first, never tonight's, no companion under a kept overlay."""

from __future__ import annotations

import fcntl
import io
import json
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import cast

from pipeline.infra.runtime import RUNTIME_FORMAT, load_runtime
from pipeline.infra.runtime_cache import (
    GIB,
    RECENT_S,
    USED_STAMP,
    CachedFolder,
    eviction_plan,
    prune_runtimes,
)
from pipeline.nightly import NightRun, _stage_cache
from pipeline.progress import Progress
from pipeline.settings import resolve

NOW = 1_800_000_000.0
DAY = 24 * 3600


def cached(name: str, gib: float, days_ago: float, companion: str | None = None) -> CachedFolder:
    return CachedFolder(name, int(gib * GIB), NOW - days_ago * DAY, companion)


def test_the_least_recently_used_go_first_until_the_rest_fits() -> None:
    runtimes = [cached("a", 10, 9), cached("b", 10, 3), cached("c", 10, 6), cached("d", 10, 2)]
    assert [r.name for r in eviction_plan(runtimes, 25 * GIB, NOW)] == ["a", "c"]
    assert eviction_plan(runtimes, 40 * GIB, NOW) == []


def test_a_runtime_used_within_a_day_is_never_removed_even_past_the_budget() -> None:
    runtimes = [cached("old", 10, 5), cached("tonight", 50, 0.1), cached("shard", 50, RECENT_S / DAY - 0.01)]
    assert [r.name for r in eviction_plan(runtimes, 10 * GIB, NOW)] == ["old"]


def test_a_companion_counts_as_used_when_its_overlay_was_and_goes_only_after_its_overlays() -> None:
    runtimes = [
        cached("companion", 3, 30),
        cached("overlay-new", 0.7, 2, companion="companion"),
        cached("overlay-old", 0.7, 20, companion="companion"),
        cached("other", 3, 10),
    ]
    # the companion was last used through overlay-new (2 days ago): 'other' goes before it
    assert [r.name for r in eviction_plan(runtimes, 4 * GIB, NOW)] == ["overlay-old", "other"]
    # with nothing of the same age before it, the overlay leaves before its companion
    assert [r.name for r in eviction_plan(runtimes, 0, NOW)] == ["overlay-old", "other", "overlay-new", "companion"]


def test_through_a_layer_between_the_overlay_goes_first_then_the_layer_then_the_companion() -> None:
    # gpu-built: vLLM's overlay over tonight's FlashInfer ("trees") over the companion ("a-companion" sorts first)
    runtimes = [
        cached("a-companion", 3, 40),
        cached("trees", 0.1, 30, companion="a-companion"),
        cached("overlay", 0.7, 2, companion="trees"),
        cached("other", 3, 10),
    ]
    assert [r.name for r in eviction_plan(runtimes, 1 * GIB, NOW)] == ["other", "overlay", "trees", "a-companion"]
    kept = eviction_plan(runtimes, 0, NOW, keep=frozenset({"overlay"}))
    assert [r.name for r in kept] == ["other"]  # a confirmed build keeps every layer it stands on


def test_a_cells_last_confirmed_build_and_its_companion_stay_however_old() -> None:
    runtimes = [
        cached("companion", 3, 60),
        cached("confirmed-overlay", 0.7, 50, companion="companion"),
        cached("stale", 3, 5),
    ]
    plan = eviction_plan(runtimes, 0, NOW, keep=frozenset({"confirmed-overlay"}))
    assert [r.name for r in plan] == ["stale"]


def make_runtime(runtimes: Path, name: str, mib: int, days_ago: float, companion: str | None = None) -> Path:
    """A runtime folder as install_runtime leaves it, made `days_ago` before NOW."""
    root = runtimes / name
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "python").write_text("")
    (root / "payload").write_bytes(os.urandom(mib * 1024 * 1024))
    meta: dict[str, object] = {"version": RUNTIME_FORMAT, "key": name, "requirements": [], "lock": []}
    if companion:
        meta["companion"] = companion
    (root / "runtime.json").write_text(json.dumps(meta))
    when = NOW - days_ago * DAY
    for path in (root / "runtime.json", root / "payload"):
        os.utime(path, (when, when))
    (runtimes / f"{name}.lock").touch()
    return root


def test_a_night_end_removes_the_oldest_past_the_budget_and_says_what_it_freed(tmp_path: Path) -> None:
    runtimes = tmp_path / "runtimes"
    make_runtime(runtimes, "cpu-aaa", 3, 40)
    make_runtime(runtimes, "cpu-bbb", 3, 10)
    make_runtime(runtimes, "cpu-ccc", 3, 0.5)
    (runtimes / ".removing-cpu-zzz-1" / "lib").mkdir(parents=True)  # a removal that crashed mid-way
    said: list[str] = []
    # a budget of 1 GiB is far above 9 MiB: nothing goes but the leftover
    assert prune_runtimes(tmp_path, 1, say=said.append, now=NOW) == []
    assert not (runtimes / ".removing-cpu-zzz-1").exists()
    assert "none removed" in said[-1]
    removed = prune_runtimes(tmp_path, 5 / 1024, say=said.append, now=NOW)  # 5 MiB: two of the three go
    assert removed == ["cpu-aaa", "cpu-bbb"]
    assert sorted(p.name for p in runtimes.iterdir()) == ["cpu-ccc", "cpu-ccc.lock"]
    assert "removed 2" in said[-1] and "least recently used first" in said[-1]


def test_a_removed_runtime_takes_its_compile_folder_with_it_and_the_shared_kernels_stay(tmp_path: Path) -> None:
    """What a runtime's servers wrote under the cache's compile/ (vLLM's cache, torch.compile's graphs: GBs a build
    on a Spark) goes with the runtime; a kept runtime's stays, and so do the kernels shared by content."""
    runtimes, compile_dir = tmp_path / "runtimes", tmp_path / "compile"
    for name, days_ago in (("cpu-aaa", 40), ("cpu-bbb", 0.5)):
        make_runtime(runtimes, name, 3, days_ago)
        (compile_dir / name / "vllm" / "modelinfos").mkdir(parents=True)  # named by the key (make_runtime's: name)
    (compile_dir / "kernels-0123456789abcdef" / "inductor").mkdir(parents=True)
    (compile_dir / ".removing-cpu-zzz-1" / "vllm").mkdir(parents=True)  # a removal that crashed mid-way
    assert prune_runtimes(tmp_path, 1 / 1024**2, now=NOW) == ["cpu-aaa"]
    assert sorted(p.name for p in compile_dir.iterdir()) == ["cpu-bbb", "kernels-0123456789abcdef"]


def test_a_runtime_whose_maker_holds_its_lock_is_kept(tmp_path: Path) -> None:
    runtimes = tmp_path / "runtimes"
    make_runtime(runtimes, "cpu-busy", 2, 30)
    make_runtime(runtimes, "cpu-idle", 2, 20)
    said: list[str] = []
    with (runtimes / "cpu-busy.lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        removed = prune_runtimes(tmp_path, 1 / 1024**2, say=said.append, now=NOW)
    assert removed == ["cpu-idle"]
    assert (runtimes / "cpu-busy" / "runtime.json").exists()
    assert "1 kept, in use by a maker or under one" in said[-1]


def test_what_a_busy_overlay_is_layered_over_stays_with_it(tmp_path: Path) -> None:
    runtimes = tmp_path / "runtimes"
    make_runtime(runtimes, "gpu-built-companion", 2, 40)
    make_runtime(runtimes, "gpu-built-trees", 1, 35, companion="gpu-built-companion")
    make_runtime(runtimes, "gpu-built-overlay", 1, 30, companion="gpu-built-trees")
    make_runtime(runtimes, "cpu-idle", 2, 20)
    said: list[str] = []
    with (runtimes / "gpu-built-overlay.lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # a maker holds the overlay now: its layer and companion are needed
        removed = prune_runtimes(tmp_path, 1 / 1024**2, say=said.append, now=NOW)
    assert removed == ["cpu-idle"]
    assert all((runtimes / name / "runtime.json").exists() for name in ("gpu-built-trees", "gpu-built-companion"))
    assert "3 kept, in use by a maker or under one" in said[-1]


def test_a_budget_of_zero_keeps_every_runtime(tmp_path: Path) -> None:
    make_runtime(tmp_path / "runtimes", "cpu-aaa", 1, 400)
    assert prune_runtimes(tmp_path, 0, now=NOW) == []
    assert (tmp_path / "runtimes" / "cpu-aaa").is_dir()


def test_loading_a_runtime_stamps_its_use(tmp_path: Path) -> None:
    root = make_runtime(tmp_path / "runtimes", "cpu-aaa", 1, 30)
    assert not (root / USED_STAMP).exists()
    assert load_runtime(root) is not None
    assert (root / USED_STAMP).stat().st_mtime > time.time() - 3600  # now, not the runtime's making 30 days ago


def test_the_nights_cache_stage_prunes_by_the_nights_settings(tmp_path: Path) -> None:
    runtimes = tmp_path / "runtimes"
    for name, days_ago in (("cpu-older", 9.0), ("cpu-newer", 3.0)):
        root = make_runtime(runtimes, name, 0, days_ago)
        with (root / "payload").open("r+b") as payload:
            os.posix_fallocate(payload.fileno(), 0, int(0.6 * GIB))  # real blocks, none written
        os.utime(root / "runtime.json", (time.time() - days_ago * DAY,) * 2)
    settings = resolve(
        settings_file=None,
        environ={},
        cli=[("paths.cache", str(tmp_path), "--set"), ("cache.runtimes_max_gib", "1", "--set")],
    ).settings
    said = io.StringIO()
    night = SimpleNamespace(settings=settings, progress=Progress(said, mode="plain"))
    _stage_cache(cast(NightRun, night))
    assert sorted(p.name for p in runtimes.iterdir() if p.is_dir()) == ["cpu-newer"]
    assert "removed 1 (0.6 GiB)" in said.getvalue()
