"""The accelerator canary: a short fixed matrix product in the candidate's own torch, its rate against the profile's.

A Spark stuck near 700 MHz (until a full power cycle) idles like a healthy one: only work shows the
clock. The canary puts the GPU under a fixed load for a few seconds, reads the SM clock and NVML's
clock-event reasons while it is still hot, and reports its rate; health judges both before anything
is booted, so a throttled host makes the night INCONCLUSIVE instead of every model "slower".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.config.matrix import Profile
from pipeline.errors import ProcessError
from pipeline.infra import procs
from pipeline.infra.launch import container_argv
from pipeline.infra.runtime import runtime_process_env
from pipeline.stages.prove.boot import Candidate, hf_cache
from pipeline.stages.prove.health import clock_events

CANARY_MARK = "SPARK_NIGHTLY_CANARY "
CANARY_SECONDS = {"cuda": 2.0, "cpu": 1.0}
# bf16 on a GPU (the tensor cores every matrix entry uses), fp32 on a CPU; sizes that keep each product short
CANARY_SIZE = {"cuda": 4096, "cpu": 512}
# Runs inside the candidate environment (vLLM brings nvidia-ml-py): argv device, size, seconds; one JSON line back.
CANARY = """
import json, sys, time
import torch
device, n, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
dtype = torch.bfloat16 if device == "cuda" else torch.float32
generator = torch.Generator().manual_seed(0)
a = torch.randn(n, n, generator=generator).to(device=device, dtype=dtype)
b = torch.randn(n, n, generator=generator).to(device=device, dtype=dtype)
sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
for _ in range(3):
    c = a @ b
sync()
products, started = 0, time.perf_counter()
while True:
    for _ in range(8):
        c = a @ b
    products += 8
    sync()
    elapsed = time.perf_counter() - started
    if elapsed >= seconds:
        break
facts = {"device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu", "dtype": str(dtype), "n": n,
         "products": products, "seconds": round(elapsed, 4), "tflops": 2 * n ** 3 * products / elapsed / 1e12,
         "finite": bool(torch.isfinite(c).all())}
if device == "cuda":
    try:
        import pynvml
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        facts["sm_mhz"] = pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
        facts["max_sm_mhz"] = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM)
        facts["reasons"] = pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
    except Exception as exc:
        facts["nvml_error"] = f"{type(exc).__name__}: {exc}"
print("SPARK_NIGHTLY_CANARY " + json.dumps(facts))
"""


@dataclass(frozen=True)
class CanaryResult:
    """What the canary measured: its rate, and the GPU's clock while it ran (None on a CPU or without NVML)."""

    device: str
    tflops: float
    products: int
    seconds: float
    finite: bool
    sm_mhz: int | None = None
    max_sm_mhz: int | None = None
    reasons: int | None = None
    nvml_error: str | None = None  # why the clock could not be read (then the clock floor cannot speak)

    @classmethod
    def parse(cls, facts: Mapping[str, Any]) -> CanaryResult:
        return cls(
            str(facts["device"]),
            float(facts["tflops"]),
            int(facts["products"]),
            float(facts["seconds"]),
            bool(facts["finite"]),
            facts.get("sm_mhz"),
            facts.get("max_sm_mhz"),
            facts.get("reasons"),
            facts.get("nvml_error"),
        )

    def describe(self) -> str:
        clock = ""
        if self.sm_mhz is not None:
            clock = f", SM clock {self.sm_mhz} MHz" + (f" of {self.max_sm_mhz} MHz" if self.max_sm_mhz else "")
        return f"{self.tflops:.3g} TFLOPS on {self.device} ({self.products} products in {self.seconds:.1f} s{clock})"


def canary_argv(candidate: Candidate, cache_dir: Path, run_name: str) -> list[str] | None:
    """How to run the canary in the candidate: its runtime's python, or its image with every GPU; None if neither."""
    accelerator = candidate.profile.accelerator
    args = [accelerator, str(CANARY_SIZE[accelerator]), str(CANARY_SECONDS[accelerator])]
    if candidate.runtime is not None:
        return [str(candidate.runtime.python), "-c", CANARY, *args]
    if candidate.image is not None:
        command = ["python3", "-c", CANARY, *args]
        cache = str(hf_cache(cache_dir))
        return list(
            container_argv(run_name, candidate.image, command, env={}, hf_cache=cache, gpus=accelerator != "cpu")
        )
    return None


def run_canary(argv: list[str], log_path: Path) -> CanaryResult:
    """Run the canary and read its line back; ProcessError when it cannot run or says nothing."""
    procs.run(argv, log_path, timeout_s=300, inactivity_s=240, env=runtime_process_env())
    for line in reversed(log_path.read_text(errors="replace").splitlines()):
        if line.startswith(CANARY_MARK):
            return CanaryResult.parse(json.loads(line[len(CANARY_MARK) :]))
    raise ProcessError(f"the canary printed no result: see {log_path}")


def wanted(profile: Profile) -> bool:
    """A GPU profile always runs the canary (its clock under load is the throttle's only sign before a boot); a CPU
    profile only with a floor of its own (CPU classes differ twofold: a shared floor would only catch gross faults)."""
    return profile.accelerator == "cuda" or "canary_min_tflops" in profile.health


@dataclass(frozen=True)
class CanaryVerdict:
    """What the canary says: the host unfit to measure (INCONCLUSIVE), the candidate broken (FAIL), or notes."""

    host: tuple[str, ...] = ()
    candidate: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def judge_canary(profile: Profile, result: CanaryResult) -> CanaryVerdict:
    """The host is unfit when its clock is held down (under the floor, or a slow rate with slowdown events, or a
    slow rate with no clock to read); a slow rate at a healthy clock is the candidate's torch or BLAS, not the
    host: said, and left to perf to judge. A product of random inputs that is not finite is the candidate's fault."""
    host, candidate, notes = [], [], []
    floor = profile.health.get("canary_min_tflops")
    events = clock_events(result.reasons)
    held = f" ({', '.join(events)})" if events else ""
    clock_floor = profile.health.get("min_sm_clock_mhz")
    slow_clock = clock_floor is not None and result.sm_mhz is not None and result.sm_mhz < clock_floor
    if slow_clock:
        host.append(f"the GPU ran the canary at {result.sm_mhz} MHz, floor {clock_floor:g} MHz{held}")
    if floor is not None and result.tflops < floor:
        slow = f"the canary ran {result.describe()}, below the profile's {floor:g} TFLOPS{held}"
        if slow_clock or events or result.sm_mhz is None:
            host.append(slow)
        else:
            notes.append(f"{slow} at a healthy clock: tonight's torch or BLAS may be slower; perf judges it")
    if result.nvml_error:
        notes.append(f"the canary could not read the GPU's clock ({result.nvml_error}): the clock floor did not speak")
    if not result.finite:
        candidate.append(f"the candidate's matrix product of random inputs is not finite: {result.describe()}")
    return CanaryVerdict(tuple(host), tuple(candidate), tuple(notes))
