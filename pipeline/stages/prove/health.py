"""Health: is this host fit to be measured? A throttled GPU or a loaded CPU makes a night INCONCLUSIVE, not FAIL.

Reading (NVML, /proc, a canary microbenchmark) is kept apart from judging, which is pure and
shows every number it used.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pynvml

from pipeline.config.matrix import Profile
from pipeline.errors import HostUnhealthy
from pipeline.infra import procs
from pipeline.infra.gpu import GpuFacts, read_gpus

# NVML clock-event (throttle) reasons that make numbers lie; idle (0x1) and application-clock settings (0x2) do not.
# NVML's own constants: an H200 at its 700 W power limit showed 0x4, the software power cap
BAD_CLOCK_EVENTS = {
    pynvml.nvmlClocksEventReasonSwPowerCap: "software power cap",
    pynvml.nvmlClocksEventReasonHwSlowdown: "hardware slowdown",
    pynvml.nvmlClocksEventReasonSyncBoost: "sync boost",
    pynvml.nvmlClocksEventReasonSwThermalSlowdown: "software thermal slowdown",
    pynvml.nvmlClocksEventReasonHwThermalSlowdown: "hardware thermal slowdown",
    pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown: "hardware power brake slowdown",
}
BUSY_PROCESS_SHARE = 0.05  # processes not ours using less than this share of a core are background noise
CANARY_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class HostFacts:
    """Everything read about the host before (or after) a measurement."""

    cpu_count: int
    load_per_core: float
    competitors: tuple[tuple[int, str, float], ...]  # pid, name, share of one core
    driver_version: str | None = None
    gpus: tuple[GpuFacts, ...] = ()
    source: str = "proc"
    canary_mb_s: float | None = None
    window: WindowFacts | None = None  # CPU use over the whole measurement, when one was watched


@dataclass(frozen=True)
class WindowFacts:
    """CPU time over a measurement window: the system's busy time, ours, and the rest (foreign), in seconds."""

    seconds: float
    cpu_count: int
    busy_s: float
    ours_s: float

    @property
    def foreign_s(self) -> float:
        return max(0.0, self.busy_s - self.ours_s)

    @property
    def foreign_per_core(self) -> float:
        """Foreign CPU time as a share of every core over the window."""
        return self.foreign_s / self.seconds / self.cpu_count if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class HealthReport:
    """Healthy or not, why, and the facts it judged."""

    healthy: bool
    reasons: tuple[str, ...]
    facts: HostFacts
    limits: Mapping[str, float] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # what could not be read, and what was read instead


def clock_events(reasons: int | None) -> list[str]:
    """NVML's clock-event reason bits that make numbers lie, in words."""
    return [text for bit, text in BAD_CLOCK_EVENTS.items() if (reasons or 0) & bit]


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".") if part.isdigit())


def judge_health(profile: Profile, facts: HostFacts, *, under_load: bool = False) -> HealthReport:
    """Compare the facts with the profile's expectations; every problem is a reason."""
    limits = dict(profile.health)
    reasons: list[str] = []
    # sampled CPU use of processes that are not ours, not the load average: that lags a minute and counts our server
    max_load = limits.get("max_load_per_core")
    foreign = sum(share for _, _, share in facts.competitors) / facts.cpu_count
    if max_load is not None and foreign > max_load:
        top = ", ".join(f"{pid} ({name}) {share:.0%}" for pid, name, share in facts.competitors[:3])
        reasons.append(f"processes that are not ours use {foreign:.2f} of each core (max {max_load:g}): {top}")
    window = facts.window
    if max_load is not None and window is not None and window.foreign_per_core > max_load:
        reasons.append(
            f"processes that are not ours used {window.foreign_per_core:.2f} of each core over the "
            f"{window.seconds:.0f} s measurement (max {max_load:g}): {window.foreign_s:.1f} CPU-seconds of "
            f"{window.busy_s:.1f} busy, short-lived processes included"
        )
    notes: list[str] = []
    if profile.accelerator == "cuda":
        reasons += _gpu_reasons(profile, facts, limits, under_load=under_load)
        notes += [_unreadable_note(gpu) for gpu in facts.gpus if gpu.unreadable]
    return HealthReport(not reasons, tuple(reasons), facts, limits, tuple(notes))


def _unreadable_note(gpu: GpuFacts) -> str:
    note = f"GPU {gpu.index} ({gpu.name}) does not report {', '.join(gpu.unreadable)}"
    if gpu.unified_memory:
        note += "; it shares the host's memory, so its free memory is the host's MemAvailable"
    return note


def driver_problems(driver: str | None, profile: Profile) -> list[str]:
    """Why this driver is outside the profile's window (590.x deadlocks CUDA graphs on GB10); none when it is in."""
    problems = []
    if driver and profile.driver_min and _version_tuple(driver) < _version_tuple(profile.driver_min):
        problems.append(f"driver {driver} is older than {profile.driver_min}")
    if driver and profile.driver_below and _version_tuple(driver) >= _version_tuple(profile.driver_below):
        problems.append(f"driver {driver} is not below {profile.driver_below}")
    return problems


def _gpu_reasons(profile: Profile, facts: HostFacts, limits: Mapping[str, float], *, under_load: bool) -> list[str]:
    reasons = []
    if not facts.gpus:
        return ["no GPU visible (NVML and nvidia-smi found none)"]
    reasons += driver_problems(facts.driver_version, profile)
    # on a machine of several GPUs, one that runs nothing (a cluster's other host's, or one no entry uses) idles at
    # its lowest clock while another serves: only a GPU with work, or one whose work cannot be read, has a floor
    working = any(gpu.processes for gpu in facts.gpus)
    for gpu in facts.gpus:
        # an idle GPU has no reason to hold its clock down; under load a GPU at its power limit flags slowdowns
        # legitimately (an H200 at 691 W showed 0x4 at 1470 MHz), so there the clock floor decides
        reasons_held = gpu.clock_event_reasons or 0
        events = clock_events(reasons_held)
        if events and not under_load:
            reasons.append(f"GPU {gpu.index} clock held down: {', '.join(events)} (reasons 0x{reasons_held:x})")
        floor = limits.get("min_sm_clock_mhz")
        idle_beside_work = working and gpu.processes == 0
        if (
            under_load
            and not idle_beside_work
            and floor is not None
            and gpu.sm_clock_mhz is not None
            and gpu.sm_clock_mhz < floor
        ):
            held = f" ({', '.join(events)})" if events else ""
            reasons.append(f"GPU {gpu.index} runs at {gpu.sm_clock_mhz} MHz under load, floor {floor:g} MHz{held}")
        hot = limits.get("max_temperature_c")
        if hot is not None and gpu.temperature_c is not None and gpu.temperature_c > hot:
            reasons.append(f"GPU {gpu.index} at {gpu.temperature_c} C, above {hot:g} C")
        free = limits.get("min_free_memory_gib")
        if free is not None and not under_load and gpu.memory_free_gib is not None and gpu.memory_free_gib < free:
            if gpu.unified_memory:
                held = f"shares the host's memory: {gpu.memory_free_gib:.1f} GiB available (MemAvailable)"
            else:
                held = f"has {gpu.memory_free_gib:.1f} GiB free"
            reasons.append(f"GPU {gpu.index} {held}, needs {free:g} GiB")
        elif free is not None and not under_load and gpu.memory_free_gib is None:
            reasons.append(f"GPU {gpu.index}: its free memory cannot be read (neither the driver nor MemAvailable)")
    return reasons


def read_host_facts(
    *, ours: Sequence[int] = (), sample_s: float = 1.0, canary: bool = True, window: WindowFacts | None = None
) -> HostFacts:
    """Read load, competing processes, GPUs (NVML, else nvidia-smi) and the canary on this host."""
    cpu_count = os.cpu_count() or 1
    load = os.getloadavg()[0] / cpu_count
    competitors = busy_processes(sample_s, exclude=set(ours) | {os.getpid()})
    driver, gpus, source = read_gpus()
    canary_mb_s = canary_throughput() if canary else None
    return HostFacts(cpu_count, load, competitors, driver, gpus, source, canary_mb_s, window)


class CpuWindow:
    """Watches CPU time from its start: the system's totals minus ours, so short-lived foreign processes count.

    Two snapshots of processes only see the ones alive at those moments; a stream of compilers or
    package installs each living under a second is invisible to them, but not to /proc/stat.
    """

    def __init__(self) -> None:
        self._started = time.monotonic()
        self._busy = _system_busy_ticks()
        self._ours = _our_ticks()

    def close(self) -> WindowFacts:
        ours_now = _our_ticks()
        ours = sum(ticks - self._ours.get(pid, 0) for pid, ticks in ours_now.items())  # new processes: all of it
        ticks = os.sysconf("SC_CLK_TCK")
        return WindowFacts(
            round(time.monotonic() - self._started, 3),
            os.cpu_count() or 1,
            (_system_busy_ticks() - self._busy) / ticks,
            ours / ticks,
        )


def _system_busy_ticks() -> int:
    """user + nice + system + irq + softirq + steal of all CPUs (idle and iowait are not busy)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
    return user + nice + system + irq + softirq + steal


def _our_ticks() -> dict[int, int]:
    """CPU ticks of our servers and their workers (with the children they reaped), and of this process itself.

    This process counts without its reaped children: whatever it waited for is not the measurement.
    """
    ticks = {}
    for pid in procs.owned_processes(None):
        fields = procs.stat_fields(pid)
        if fields is not None:
            ticks[pid] = sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
    own = procs.stat_fields(os.getpid())
    if own is not None:
        ticks[os.getpid()] = int(own[11]) + int(own[12])
    return ticks


def judge_window(profile: Profile, window: CpuWindow) -> HealthReport:
    """The host's health over a measurement that just ended: foreign CPU time over it, the GPU under load now."""
    return judge_health(profile, read_host_facts(canary=False, window=window.close()), under_load=True)


@contextmanager
def watched(profile: Profile) -> Iterator[None]:
    """A health window over the block; raises HostUnhealthy after it if foreign load or the GPU spoiled it."""
    window = CpuWindow()
    yield
    report = judge_window(profile, window)
    if not report.healthy:
        raise HostUnhealthy("; ".join(report.reasons))


def busy_processes(sample_s: float, *, exclude: set[int]) -> tuple[tuple[int, str, float], ...]:
    """Processes using at least BUSY_PROCESS_SHARE of a core over the sample, other than ours."""
    first = _cpu_times()
    time.sleep(sample_s)
    second = _cpu_times()
    ticks = os.sysconf("SC_CLK_TCK")
    ours = set(procs.owned_processes(None))  # our servers and their workers are the measurement, not competition
    busy = []
    for pid, (name, used) in second.items():
        if pid in exclude or pid not in first or pid in ours:
            continue
        share = (used - first[pid][1]) / ticks / sample_s
        if share >= BUSY_PROCESS_SHARE:
            busy.append((pid, name, round(share, 2)))
    return tuple(sorted(busy, key=lambda p: -p[2]))


def _cpu_times() -> dict[int, tuple[str, int]]:
    times = {}
    for pid, stat in procs.process_files("stat"):
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        times[pid] = (name, int(fields[11]) + int(fields[12]))  # utime + stime
    return times


def canary_throughput(size: int = CANARY_BYTES) -> float:
    """MB/s of sha256 over a fixed buffer: a tiny host benchmark whose own history shows host drift."""
    block = bytes(range(256)) * (size // 256)
    started = time.perf_counter()
    hashlib.sha256(block).hexdigest()
    return size / 1e6 / (time.perf_counter() - started)


def health_facts_for_history(report: HealthReport) -> dict[str, Any]:
    """A compact, JSON-ready record of the health a sample was measured under."""
    facts = report.facts
    return {
        "healthy": report.healthy,
        "load_per_core": round(facts.load_per_core, 2),
        "driver": facts.driver_version,
        "canary_mb_s": facts.canary_mb_s,
        "source": facts.source,
        "window": None
        if facts.window is None
        else {
            "seconds": facts.window.seconds,
            "busy_s": round(facts.window.busy_s, 2),
            "ours_s": round(facts.window.ours_s, 2),
            "foreign_per_core": round(facts.window.foreign_per_core, 3),
        },
        "gpus": [
            {
                "sm_mhz": g.sm_clock_mhz,
                "reasons": g.clock_event_reasons,
                "power_w": g.power_w,
                "temp_c": g.temperature_c,
                "free_gib": None if g.memory_free_gib is None else round(g.memory_free_gib, 1),
                "unified_memory": g.unified_memory,
                "unreadable": list(g.unreadable),
            }
            for g in facts.gpus
        ],
    }
