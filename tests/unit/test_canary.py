"""The accelerator canary's judgement: a GB10 stuck near 700 MHz under the canary's load is unfit to measure (the
clock named), a healthy one passes, a rate under the profile's floor names the rate and the clock-event reasons.

The clocks are in GB10's shape (nvitop PR #208: SM 2418 MHz max on driver 580.173.02); the throttle near 700 MHz
under load is the one Spark users reported until a full power cycle.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from pipeline.config.bundle import ConfigPaths, load_config
from pipeline.config.matrix import Profile
from pipeline.stages.prove.boot import Candidate
from pipeline.stages.prove.canary import CANARY, CanaryResult, CanaryVerdict, canary_argv, judge_canary, wanted

ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def spark() -> Profile:
    config = load_config(ConfigPaths(ROOT / "models.yaml", ROOT / "thresholds", ROOT / "golden"))
    profile: Profile = config.matrix.profiles["spark"]
    return profile


def _gb10(tflops: float, sm_mhz: int, reasons: int = 0) -> CanaryResult:
    return CanaryResult("NVIDIA GB10", tflops, 400, 2.0, True, sm_mhz, 2418, reasons)


def test_a_healthy_gb10_passes_the_canary(spark: Profile) -> None:
    assert judge_canary(spark, _gb10(40.0, 2405)) == CanaryVerdict()


def test_a_gb10_stuck_near_700_mhz_is_unfit_and_the_clock_is_named(spark: Profile) -> None:
    verdict = judge_canary(spark, _gb10(11.2, 702, reasons=0x8))
    assert verdict.host == (
        "the GPU ran the canary at 702 MHz, floor 1200 MHz (hardware slowdown)",
        "the canary ran 11.2 TFLOPS on NVIDIA GB10 (400 products in 2.0 s, SM clock 702 MHz of 2418 MHz), below the "
        "profile's 25 TFLOPS (hardware slowdown)",
    )
    assert verdict.candidate == ()


def test_a_slow_product_at_a_healthy_clock_is_the_candidates_to_explain_not_the_hosts(spark: Profile) -> None:
    verdict = judge_canary(spark, _gb10(12.0, 2405))
    assert verdict.host == () and verdict.candidate == ()
    (note,) = verdict.notes
    assert note.endswith("at a healthy clock: tonight's torch or BLAS may be slower; perf judges it")


def test_a_product_that_is_not_finite_fails_the_candidate(spark: Profile) -> None:
    verdict = judge_canary(spark, replace(_gb10(40.0, 2405), finite=False))
    assert verdict.host == ()
    assert verdict.candidate == ("the candidate's matrix product of random inputs is not finite: 40 TFLOPS on NVIDIA "
                                 "GB10 (400 products in 2.0 s, SM clock 2405 MHz of 2418 MHz)",)  # fmt: skip


def test_a_clock_that_cannot_be_read_is_said(spark: Profile) -> None:
    result = replace(_gb10(40.0, 2405), sm_mhz=None, nvml_error="NVMLError_NotSupported: Not Supported")
    assert judge_canary(spark, result).notes == (
        "the canary could not read the GPU's clock (NVMLError_NotSupported: Not Supported): the clock floor did not "
        "speak",
    )


def test_a_gpu_profile_always_runs_the_canary_and_a_cpu_profile_only_with_a_floor(spark: Profile) -> None:
    cpu = replace(spark, accelerator="cpu", health=MappingProxyType({}))
    assert wanted(spark) and not wanted(cpu)
    assert wanted(replace(cpu, health=MappingProxyType({"canary_min_tflops": 0.001})))


def test_on_a_spark_the_canary_runs_in_tonights_image_with_every_gpu(spark: Profile, tmp_path: Path) -> None:
    argv = canary_argv(Candidate(spark, image="spark-nightly/runtime:abc"), tmp_path, "spark-nightly-canary-r-e")
    assert argv is not None
    assert argv[:6] == ["docker", "run", "--rm", "--name", "spark-nightly-canary-r-e", "--gpus"]
    image = argv.index("spark-nightly/runtime:abc")
    assert argv[image + 1 :] == ["python3", "-c", CANARY, "cuda", "4096", "2.0"]


def test_a_canary_line_is_read_back(spark: Any) -> None:
    facts = {
        "device": "cpu",
        "dtype": "torch.float32",
        "n": 512,
        "products": 72,
        "seconds": 1.02,
        "tflops": 0.0186,
        "finite": True,
    }
    result = CanaryResult.parse(facts)
    assert result.sm_mhz is None and result.describe() == "0.0186 TFLOPS on cpu (72 products in 1.0 s)"
