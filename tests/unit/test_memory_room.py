"""Memory before each boot: a GB10 entry needs gpu_memory_utilization x MemTotal of MemAvailable, the page cache is
dropped first, and an entry that cannot get its room is INCONCLUSIVE naming what holds the memory.

The GB10's MemTotal (127600748 kB) is the one nvitop PR #208 shows for a DGX Spark on driver 580.173.02.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.config.bundle import ConfigPaths, load_config
from pipeline.stages.prove.memory import entry_need, make_room, read_meminfo

ROOT = Path(__file__).parents[2]
GB10_TOTAL_GIB = 127600748 / (1024 * 1024)


@pytest.fixture(scope="module")
def config() -> Any:
    return load_config(ConfigPaths(ROOT / "models.yaml", ROOT / "thresholds", ROOT / "golden"))


def _entry(config: Any, entry_id: str) -> Any:
    return next(e for e in config.matrix.entries if e.id == entry_id)


class Clock:
    """A clock that moves only when the code under test pauses."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def pause(self, seconds: float) -> None:
        self.now += seconds


def _meminfo(free: Iterator[float], field: str = "MemFree") -> Any:
    """/proc/meminfo over time: `field` as given, MemAvailable (the page cache counted as free) otherwise ample."""
    return lambda: {"MemTotal": GB10_TOTAL_GIB, "MemAvailable": 120.0} | {field: next(free)}


def test_a_gb10_entry_needs_its_share_of_the_unified_memory(config: Any) -> None:
    spark = config.matrix.profiles["spark"]
    need = entry_need(_entry(config, "qwen3.5-35b-a3b-fp8"), spark, GB10_TOTAL_GIB)
    assert need is not None and need.gib == pytest.approx(0.85 * GB10_TOTAL_GIB)
    assert need.why == "gpu_memory_utilization 0.85 x 121.7 GiB of unified memory"


def test_the_cpu_entry_needs_its_kv_cache_and_its_engine(config: Any) -> None:
    need = entry_need(_entry(config, "smollm2-135m-instruct"), config.matrix.profiles["cpu"], 23.5)
    assert need is not None and need.gib == pytest.approx(3.6)
    assert need.why == "KV cache 1 GiB + engine and weights 2.6 GiB"


def test_caches_are_dropped_then_the_entry_waits_until_the_memory_comes_back(config: Any, tmp_path: Path) -> None:
    clock, dropped, said = Clock(), [], []
    room = make_room(
        _entry(config, "gpt-oss-120b"),
        config.matrix.profiles["spark"],
        tmp_path,
        say=said.append,
        meminfo=_meminfo(iter([121.7, 40.0, 70.0, 112.0])),  # the last server's memory returns over two seconds
        drop=lambda log_dir: dropped.append(log_dir) or "dropped",
        holders=lambda: (),
        clock=clock,
        pause=clock.pause,
    )
    assert room is not None and room.ok and room.available_gib == 112.0 and room.waited_s == 2.0
    assert room.field == "MemFree"  # a GB10 waits on free pages: the page cache counts as used at vLLM's start
    assert dropped == [tmp_path] and len(said) == 1 and "103.4 GiB" in said[0]


def test_an_entry_that_cannot_get_its_room_names_what_holds_the_memory(config: Any, tmp_path: Path) -> None:
    clock = Clock()
    room = make_room(
        _entry(config, "qwen3.5-35b-a3b-fp8"),
        config.matrix.profiles["spark"],
        tmp_path,
        meminfo=_meminfo(iter([121.7] + [61.2] * 500)),
        drop=lambda log_dir: "not dropped: sudo -n refused or failed (a password is required); see the runbook",
        holders=lambda: ((4242, "python3", 58.3), (77, "dockerd", 0.4)),
        clock=clock,
        pause=clock.pause,
    )
    assert room is not None and not room.ok and room.waited_s == 120.0
    assert room.reason == (
        "needs 103.4 GiB (gpu_memory_utilization 0.85 x 121.7 GiB of unified memory), 61.2 GiB MemFree after 120 s "
        "(page cache not dropped: sudo -n refused or failed (a password is required); see the runbook); "
        "largest holders: 4242 (python3) 58.3 GiB, 77 (dockerd) 0.4 GiB"
    )


def test_a_profile_without_drop_caches_never_drops_them(config: Any, tmp_path: Path) -> None:
    room = make_room(
        _entry(config, "smollm2-135m-instruct"),
        config.matrix.profiles["cpu"],
        tmp_path,
        meminfo=_meminfo(iter([20.0, 20.0]), field="MemAvailable"),
        drop=lambda log_dir: pytest.fail("the CPU profile does not drop caches"),
    )
    assert room is not None and room.ok and room.dropped == "not asked" and room.field == "MemAvailable"


def test_meminfo_is_read_in_gib(tmp_path: Path) -> None:
    path = tmp_path / "meminfo"
    path.write_text("MemTotal:       127600748 kB\nMemAvailable:   118566368 kB\nHugePages_Total:       0\n")
    fields = read_meminfo(path)
    assert fields["MemTotal"] == pytest.approx(121.69, abs=0.01) and fields["MemAvailable"] == pytest.approx(
        113.07, abs=0.01
    )
