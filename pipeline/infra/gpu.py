"""What the GPUs say about themselves: NVML field by field, else nvidia-smi; on a unified-memory GPU (GB10) the free
memory is the host's MemAvailable.

A GB10 answers NOT_SUPPORTED to nvmlDeviceGetMemoryInfo and its _v2 (drivers 580.95 to 580.173: nvitop PR #208,
gpud PR #1170, NVIDIA's DGX Spark known issues) and nvidia-smi prints `[N/A]` for memory.*, while the SM clock, the
power and the temperature read normally. So each field is read on its own: one the driver does not give is named in
`unreadable`, and never abandons the others.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pynvml  # nvidia-ml-py: imports anywhere, needs a driver only at nvmlInit

MEMINFO = Path("/proc/meminfo")
_UNAVAILABLE = {"[N/A]", "N/A", "[Not Supported]", "Not Supported", "[Unknown Error]", ""}
SMI_FIELDS = (
    "index,name,clocks.sm,clocks.max.sm,clocks_event_reasons.active,power.draw,temperature.gpu,"
    "memory.free,driver_version"
)


@dataclass(frozen=True)
class GpuFacts:
    """What NVML (or nvidia-smi) reported for one GPU; None where the driver would not say."""

    index: int
    name: str
    sm_clock_mhz: int | None
    max_sm_clock_mhz: int | None
    clock_event_reasons: int | None
    power_w: float | None
    temperature_c: int | None
    memory_free_gib: float | None
    unified_memory: bool = False  # no memory of its own: memory_free_gib is the host's MemAvailable
    unreadable: tuple[str, ...] = ()  # the fields the driver did not give (NOT_SUPPORTED, N/A), by name
    processes: int | None = None  # compute processes running on it (NVML), None where not read


def read_gpus(
    *, nvml: ModuleType = pynvml, smi: Callable[[], str] | None = None, meminfo: Path = MEMINFO
) -> tuple[str | None, tuple[GpuFacts, ...], str]:
    """(driver, GPUs, source): through NVML, falling back to nvidia-smi; none on a CPU host."""
    try:
        return read_nvml(nvml, meminfo)
    except Exception:  # no library, no driver, or no GPU: try the command line tool
        pass
    try:
        return parse_nvidia_smi((smi or run_nvidia_smi)(), meminfo)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None, (), "none"


def read_nvml(nvml: ModuleType, meminfo: Path = MEMINFO) -> tuple[str | None, tuple[GpuFacts, ...], str]:
    """Every GPU through NVML; raises only when NVML itself or the device list cannot be had."""
    nvml.nvmlInit()  # raises without a driver or a GPU
    try:
        driver = str(nvml.nvmlSystemGetDriverVersion())
        gpus = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            missing: list[str] = []
            sm = _read(nvml, missing, "sm clock", nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM)
            max_sm = _read(nvml, missing, "max sm clock", nvml.nvmlDeviceGetMaxClockInfo, handle, nvml.NVML_CLOCK_SM)
            reasons = _read(nvml, missing, "clock events", nvml.nvmlDeviceGetCurrentClocksEventReasons, handle)
            power = _read(nvml, missing, "power", nvml.nvmlDeviceGetPowerUsage, handle)
            temp = _read(nvml, missing, "temperature", nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU)
            memory = _read(nvml, missing, "memory", nvml.nvmlDeviceGetMemoryInfo, handle)
            gpu = GpuFacts(
                index,
                str(nvml.nvmlDeviceGetName(handle)),
                _int(sm),
                _int(max_sm),
                _int(reasons),
                None if power is None else power / 1000,
                _int(temp),
                None if memory is None else memory.free / 2**30,
                unreadable=tuple(missing),
                processes=_processes(nvml, handle),
            )
            gpus.append(with_host_memory(gpu, meminfo))
        return driver, tuple(gpus), "nvml"
    finally:
        nvml.nvmlShutdown()


def _read(nvml: ModuleType, missing: list[str], name: str, call: Callable[..., Any], *args: Any) -> Any:
    """One NVML field; one the driver refuses (NOT_SUPPORTED on GB10's memory, or any other error) is None, named."""
    try:
        return call(*args)
    except nvml.NVMLError:
        missing.append(name)
        return None


def _processes(nvml: ModuleType, handle: Any) -> int | None:
    """How many compute processes run on the GPU; None where NVML will not say (the health gate then assumes busy)."""
    running = getattr(nvml, "nvmlDeviceGetComputeRunningProcesses", None)
    try:
        return None if running is None else len(running(handle))
    except nvml.NVMLError:
        return None


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def run_nvidia_smi() -> str:
    return subprocess.run(
        ["nvidia-smi", f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout


def parse_nvidia_smi(output: str, meminfo: Path = MEMINFO) -> tuple[str | None, tuple[GpuFacts, ...], str]:
    """nvidia-smi's CSV (noheader, nounits) for SMI_FIELDS into GPU facts; `[N/A]` is a field it does not give."""
    gpus, driver = [], None
    names = ("sm clock", "max sm clock", "clock events", "power", "temperature", "memory")
    for line in output.strip().splitlines():
        index, name, sm, max_sm, reasons, power, temp, free, driver = (part.strip() for part in line.split(","))
        unreadable = tuple(
            n for n, raw in zip(names, (sm, max_sm, reasons, power, temp, free), strict=True) if _na(raw)
        )
        gpu = GpuFacts(
            int(index),
            name,
            None if _na(sm) else int(sm),
            None if _na(max_sm) else int(max_sm),
            None if _na(reasons) else int(reasons, 16),
            None if _na(power) else float(power),
            None if _na(temp) else int(temp),
            None if _na(free) else float(free) / 1024,
            unreadable=unreadable,
        )
        gpus.append(with_host_memory(gpu, meminfo))
    return driver, tuple(gpus), "nvidia-smi"


def with_host_memory(gpu: GpuFacts, meminfo: Path = MEMINFO) -> GpuFacts:
    """A GPU whose driver gives no memory shares the host's: its free memory is MemAvailable."""
    if "memory" not in gpu.unreadable:
        return gpu
    return replace(gpu, memory_free_gib=mem_available_gib(meminfo), unified_memory=True)


def mem_available_gib(meminfo: Path = MEMINFO) -> float | None:
    """The host's MemAvailable in GiB (what the kernel can give without swapping), None if it cannot be read."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024**2  # kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def _na(raw: str) -> bool:
    return raw.strip() in _UNAVAILABLE
