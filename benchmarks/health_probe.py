"""Probe: what the health check reads on this host, idle and under GPU load, and how it judges the Spark profile.

Prints NVML's facts (driver, SM clock, clock-event reasons, power, temperature, free memory), the
nvidia-smi fallback's reading of the same GPUs, and the health verdict with its reasons.
Run on a GPU host: python benchmarks/health_probe.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))

from pipeline.config.matrix import Profile, TorchExpectation
from pipeline.stages.prove.health import judge_health, read_host_facts, read_nvidia_smi, read_nvml

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
    print(json.dumps({"facts": asdict(facts), "reasons": report.reasons}, indent=1, default=str))


def main() -> None:
    driver, gpus, source = read_nvml()
    print(f"NVML: driver {driver}, {len(gpus)} GPU(s) via {source}")
    smi_driver, smi_gpus, _ = read_nvidia_smi()
    print(f"nvidia-smi fallback: driver {smi_driver}, {[asdict(g) for g in smi_gpus]}")
    show("idle", under_load=False)
    load = subprocess.Popen([sys.executable, "-c", LOAD])
    time.sleep(8)
    show("under a bf16 matmul load", under_load=True)
    load.wait()


if __name__ == "__main__":
    main()
