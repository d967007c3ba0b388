"""Health on a GB10 as it really answers: NVML's memory calls NOT_SUPPORTED (unified memory), nvidia-smi's memory.*
`[N/A]`, everything else readable. The entry goes on to boot, judged on the host's MemAvailable; a GPU held near
700 MHz under load still makes the night INCONCLUSIVE, naming the clock.

Where each answer comes from: nvitop PR #208 (a DGX Spark, driver 580.173.02: nvmlDeviceGetMemoryInfo and _v2 ->
NVML_ERROR_NOT_SUPPORTED; MemTotal 127600748 kB, MemAvailable 118566368 kB; nvidia-smi memory.total, memory.used,
memory.free `[N/A]`, power.draw 11.17 W, temperature.gpu 35), gpud PR #1170 (product name NVIDIA-GB10, both memory
calls "Not Supported"), NVIDIA's DGX Spark known issues ("nvidia-smi reports memory usage Not Supported"). The SM
clocks (2418 MHz idle) are this test's own numbers in that shape; the throttle near 700 MHz is the one users reported.
"""

from __future__ import annotations

import types
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pynvml
import pytest

from pipeline.config.bundle import ConfigPaths, load_config
from pipeline.infra.gpu import GpuFacts, parse_nvidia_smi, read_gpus, read_nvml
from pipeline.stages.prove.health import HostFacts, judge_health

ROOT = Path(__file__).parents[2]
MEMINFO = "MemTotal:       127600748 kB\nMemFree:         9040124 kB\nMemAvailable:   118566368 kB\n"
SMI_GB10 = "0, NVIDIA GB10, 2418, 2418, 0x0000000000000000, 11.17, 35, [N/A], 580.173.02\n"


@pytest.fixture
def meminfo(tmp_path: Path) -> Path:
    path = tmp_path / "meminfo"
    path.write_text(MEMINFO)
    return path


@pytest.fixture
def spark() -> Any:
    return load_config(ConfigPaths(ROOT / "models.yaml", ROOT / "thresholds", ROOT / "golden")).matrix.profiles["spark"]


def gb10_nvml(sm_mhz: int = 2418, reasons: int = 0) -> types.ModuleType:
    """pynvml's names and errors, with a GB10's answers: memory NOT_SUPPORTED, the rest as read."""
    fake = types.ModuleType("gb10_nvml")
    fake.__dict__.update({k: v for k, v in pynvml.__dict__.items() if k.startswith(("NVML_", "NVMLError"))})

    def not_supported(*_: Any) -> Any:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    answers = {
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlSystemGetDriverVersion": lambda: "580.173.02",
        "nvmlDeviceGetCount": lambda: 1,
        "nvmlDeviceGetHandleByIndex": lambda index: object(),
        "nvmlDeviceGetName": lambda handle: "NVIDIA GB10",
        "nvmlDeviceGetClockInfo": lambda handle, clock: sm_mhz,
        "nvmlDeviceGetMaxClockInfo": lambda handle, clock: 2418,
        "nvmlDeviceGetCurrentClocksEventReasons": lambda handle: reasons,
        "nvmlDeviceGetPowerUsage": lambda handle: 11170,  # mW
        "nvmlDeviceGetTemperature": lambda handle, sensor: 35,
        "nvmlDeviceGetMemoryInfo": not_supported,
    }
    fake.__dict__.update(answers)
    return fake


def test_nvml_on_a_gb10_reads_every_field_but_memory_and_takes_memavailable(meminfo: Path) -> None:
    driver, (gpu,), source = read_nvml(gb10_nvml(), meminfo)
    assert (driver, source) == ("580.173.02", "nvml")
    assert (gpu.name, gpu.sm_clock_mhz, gpu.power_w, gpu.temperature_c) == ("NVIDIA GB10", 2418, 11.17, 35)
    assert gpu.unified_memory and gpu.unreadable == ("memory",)
    assert gpu.memory_free_gib == pytest.approx(118566368 / 1024**2)  # 113.1 GiB


def test_nvidia_smis_n_a_memory_is_parsed_not_a_crash(meminfo: Path) -> None:
    driver, (gpu,), source = parse_nvidia_smi(SMI_GB10, meminfo)
    assert (driver, source) == ("580.173.02", "nvidia-smi")
    assert gpu == GpuFacts(0, "NVIDIA GB10", 2418, 2418, 0, 11.17, 35, 118566368 / 1024**2, True, ("memory",))


def test_without_nvml_the_fallback_to_nvidia_smi_still_sees_the_gb10(meminfo: Path) -> None:
    no_driver = types.ModuleType("no_nvml")
    no_driver.nvmlInit = lambda: (_ for _ in ()).throw(OSError("libnvidia-ml.so.1 not found"))  # type: ignore[attr-defined]
    driver, gpus, source = read_gpus(nvml=no_driver, smi=lambda: SMI_GB10, meminfo=meminfo)
    assert (driver, len(gpus), source) == ("580.173.02", 1, "nvidia-smi")


def test_the_health_stage_passes_a_gb10_and_says_what_it_read_instead(meminfo: Path, spark: Any) -> None:
    driver, gpus, source = read_nvml(gb10_nvml(), meminfo)
    report = judge_health(spark, HostFacts(20, 0.01, (), driver, gpus, source))
    assert report.healthy, report.reasons  # the entry goes on to boot
    assert report.notes == (
        "GPU 0 (NVIDIA GB10) does not report memory; it shares the host's memory, so its free memory is the host's "
        "MemAvailable",
    )


def test_a_gb10_held_near_700_mhz_under_load_is_inconclusive_naming_the_clock(meminfo: Path, spark: Any) -> None:
    driver, gpus, source = read_nvml(gb10_nvml(sm_mhz=702, reasons=0x8), meminfo)
    report = judge_health(spark, HostFacts(20, 0.01, (), driver, gpus, source), under_load=True)
    assert not report.healthy
    assert report.reasons == ("GPU 0 runs at 702 MHz under load, floor 1200 MHz (hardware slowdown)",)


def test_a_page_cache_that_holds_the_memory_is_named_as_the_hosts(tmp_path: Path, spark: Any) -> None:
    full = tmp_path / "meminfo"
    full.write_text("MemTotal:       127600748 kB\nMemAvailable:    7976902 kB\n")
    driver, gpus, source = read_nvml(gb10_nvml(), full)
    assert judge_health(spark, HostFacts(20, 0.01, (), driver, gpus, source)).healthy  # the memory stage waits
    floored = replace(spark, health=MappingProxyType(dict(spark.health) | {"min_free_memory_gib": 100}))
    report = judge_health(floored, HostFacts(20, 0.01, (), driver, gpus, source))
    assert report.reasons == ("GPU 0 shares the host's memory: 7.6 GiB available (MemAvailable), needs 100 GiB",)
