"""Memory before a boot: the page cache dropped where the profile says so, then free memory awaited for the entry.

On a GB10 the GPU's memory is the host's: a server at 0.85 utilisation needs 0.85 x MemTotal free, and
the page cache the previous model's weights left behind counts against vLLM's start-up check. When
the room cannot be had in time the entry is INCONCLUSIVE with the processes holding the memory named:
the host, not the wheels.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pipeline.config.matrix import ModelEntry, Profile
from pipeline.infra import procs
from pipeline.progress import Say, quiet

DROP_CACHES = Path("/proc/sys/vm/drop_caches")
DROP_CACHES_COMMAND = "echo 3 > /proc/sys/vm/drop_caches"  # what sudo runs for a runner user (the runbook's line)
# vLLM's defaults when an entry does not say: --gpu-memory-utilization 0.9, VLLM_CPU_KVCACHE_SPACE 4 GiB
DEFAULT_UTILISATION = 0.9
DEFAULT_CPU_KV_GIB = 4.0
POLL_S = 1.0
HOLDERS_SHOWN = 3


@dataclass(frozen=True)
class Need:
    """What an entry needs free before its boot, and how that was worked out."""

    gib: float
    why: str


@dataclass(frozen=True)
class Room:
    """Whether the need was met before the boot, with every number used."""

    ok: bool
    need: Need
    available_gib: float | None
    field: str  # MemFree on unified memory (vLLM's start-up check counts the page cache as used), else MemAvailable
    dropped: str  # what happened to the page cache: "dropped", "not asked", or why it could not be
    waited_s: float
    holders: tuple[tuple[int, str, float], ...] = ()  # pid, name, GiB resident: the largest, when short

    @property
    def reason(self) -> str:
        available = "unknown" if self.available_gib is None else f"{self.available_gib:.1f} GiB"
        text = (
            f"needs {self.need.gib:.1f} GiB ({self.need.why}), {available} {self.field} after "
            f"{self.waited_s:.0f} s (page cache {self.dropped})"
        )
        if self.holders:
            held = ", ".join(f"{pid} ({name}) {gib:.1f} GiB" for pid, name, gib in self.holders)
            text += f"; largest holders: {held}"
        return text


def entry_need(entry: ModelEntry, profile: Profile, total_gib: float) -> Need | None:
    """The memory the entry's server takes at start-up on this host, or None where the host's memory is not it."""
    rules = profile.memory
    if profile.accelerator == "cpu":
        kv = float(entry.env.get("VLLM_CPU_KVCACHE_SPACE", DEFAULT_CPU_KV_GIB))
        return Need(kv + rules.overhead_gib, f"KV cache {kv:g} GiB + engine and weights {rules.overhead_gib:g} GiB")
    if rules.unified:
        share = float(entry.serve.get("gpu_memory_utilization", DEFAULT_UTILISATION))
        return Need(share * total_gib, f"gpu_memory_utilization {share:g} x {total_gib:.1f} GiB of unified memory")
    return None  # a discrete GPU: its own memory, which health reads from the driver


def read_meminfo(path: Path = Path("/proc/meminfo")) -> dict[str, float]:
    """/proc/meminfo's fields in GiB (its kB values)."""
    fields: dict[str, float] = {}
    for line in path.read_text().splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            fields[name] = int(parts[0]) / (1024 * 1024)
    return fields


def drop_page_cache(log_dir: Path) -> str:
    """Write back dirty pages and drop the page cache: directly as root, else through `sudo -n` (the runbook gives
    the runner user that one right). Returns what happened, for the report; never raises."""
    os.sync()
    try:
        DROP_CACHES.write_text("3\n")
        return "dropped"
    except OSError as direct:
        if os.geteuid() == 0:
            return f"not dropped: {direct.strerror}"
    try:
        procs.run(["sudo", "-n", "sh", "-c", DROP_CACHES_COMMAND], log_dir / "drop-caches.log", timeout_s=60)
    except Exception as exc:
        return f"not dropped: sudo -n refused or failed ({str(exc).splitlines()[0]}); see the runbook"
    return "dropped (sudo)"


def largest_holders(limit: int = HOLDERS_SHOWN, proc: Path = Path("/proc")) -> tuple[tuple[int, str, float], ...]:
    """The processes with the most resident memory (containers' included: they are the host's processes)."""
    found = []
    for pid, status in procs.process_files("status", proc):
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        rss = fields.get("VmRSS", "").split()
        if rss and rss[0].isdigit():
            found.append((pid, fields.get("Name", "?").strip(), int(rss[0]) / (1024 * 1024)))
    return tuple(sorted(found, key=lambda p: -p[2])[:limit])


def make_room(  # noqa: PLR0913 -- the stage's inputs, each by keyword
    entry: ModelEntry,
    profile: Profile,
    log_dir: Path,
    *,
    say: Say = quiet,
    meminfo: Callable[[], Mapping[str, float]] = read_meminfo,
    drop: Callable[[Path], str] = drop_page_cache,
    holders: Callable[[], tuple[tuple[int, str, float], ...]] = largest_holders,
    clock: Callable[[], float] = time.monotonic,
    pause: Callable[[float], None] = time.sleep,
) -> Room | None:
    """Drop caches if the profile says so, then wait up to the profile's wait_s for the entry's need; None where
    the profile has no need to check (a discrete GPU)."""
    first = meminfo()
    need = entry_need(entry, profile, first.get("MemTotal", 0.0))
    if need is None:
        return None
    dropped = drop(log_dir) if profile.memory.drop_caches else "not asked"
    # on unified memory the GPU's free memory is the host's free pages: cache the kernel could reclaim still counts
    # as used in vLLM's start-up check, so MemAvailable would wave through a boot that then fails
    field = "MemFree" if profile.memory.unified else "MemAvailable"
    started, announced = clock(), False
    while True:
        available = meminfo().get(field)
        waited = clock() - started
        if available is not None and available >= need.gib:
            return Room(True, need, available, field, dropped, waited)
        if waited >= profile.memory.wait_s:
            return Room(False, need, available, field, dropped, waited, holders())
        if not announced:
            say(f"{entry.id}: waiting up to {profile.memory.wait_s:g} s for {need.gib:.1f} GiB of free memory")
            announced = True
        pause(POLL_S)
