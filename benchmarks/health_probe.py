"""Probe: what the health check reads on this host, idle and under GPU load, and how it judges the Spark profile.

Prints NVML's facts (driver, SM clock, clock-event reasons, power, temperature, free memory), the
nvidia-smi fallback's reading of the same GPUs, NVML again with its memory call answering NOT_SUPPORTED as a
GB10's does (every other field from the real driver), and the health verdict with its reasons and notes.
Run on a GPU host: python benchmarks/health_probe.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import types
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pynvml

sys.path.insert(0, str(Path(__file__).parents[1]))

from pipeline.config.matrix import Profile, TorchExpectation
from pipeline.infra.gpu import parse_nvidia_smi, read_nvml, run_nvidia_smi
from pipeline.stages.prove.health import HostFacts, judge_health, read_host_facts

SPARK_LIKE = Profile(
    "spark",
    "spark-gb10",
    "cuda",
    TorchExpectation("2.13.0", "13.0"),
    "build",
    driver_min="580",
    driver_below="590",
    health={"min_sm_clock_mhz": 1200, "max_temperature_c": 90, "min_free_memory_gib": 10},
)
LOAD = (
    "import torch, time\n"
    "a = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16)\n"
    "end = time.time() + 20\n"
    "while time.time() < end:\n"
    "    (a @ a).sum().item()\n"
)


def show(label: str, under_load: bool) -> None:
    facts = read_host_facts(sample_s=1.0)
    report = judge_health(SPARK_LIKE, facts, under_load=under_load)
    print(f"== {label}: healthy={report.healthy}")
    print(json.dumps({"facts": asdict(facts), "reasons": report.reasons, "notes": report.notes}, indent=1, default=str))


def gb10_memory(nvml: types.ModuleType) -> types.ModuleType:
    """NVML as it is, but for nvmlDeviceGetMemoryInfo, which answers NOT_SUPPORTED as on a GB10 (nvitop PR #208)."""
    wrapped = types.ModuleType("pynvml_gb10_memory")
    wrapped.__dict__.update(nvml.__dict__)

    def not_supported(*_: Any) -> Any:
        raise nvml.NVMLError(nvml.NVML_ERROR_NOT_SUPPORTED)

    wrapped.nvmlDeviceGetMemoryInfo = not_supported  # type: ignore[attr-defined]
    return wrapped


def main() -> None:
    driver, gpus, source = read_nvml(pynvml)
    print(f"NVML: driver {driver}, {len(gpus)} GPU(s) via {source}: {[asdict(g) for g in gpus]}")
    smi_driver, smi_gpus, _ = parse_nvidia_smi(run_nvidia_smi())
    print(f"nvidia-smi fallback: driver {smi_driver}, {[asdict(g) for g in smi_gpus]}")
    driver, gpus, _ = read_nvml(gb10_memory(pynvml))
    print(f"NVML, memory answering as a GB10's: {[asdict(g) for g in gpus]}")
    facts = HostFacts(1, 0.0, (), driver, gpus, "nvml")
    report = judge_health(SPARK_LIKE, facts)
    print(f"judged: healthy={report.healthy}, reasons={report.reasons}, notes={report.notes}")
    show("idle", under_load=False)
    load = subprocess.Popen([sys.executable, "-c", LOAD])
    time.sleep(8)
    show("under a bf16 matmul load", under_load=True)
    load.wait()


if __name__ == "__main__":
    main()
