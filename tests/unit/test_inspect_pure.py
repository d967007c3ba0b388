"""The architecture rules of inspection and cuobjdump's listing format, without running anything."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipeline.infra.fatbin import Image, Inventory, _parse_headers
from pipeline.stages.build.arch_rules import cubin_runs_on, platform_problem, ptx_runs_on
from pipeline.stages.build.inspect import CubinSet, Target, WheelReport, companion_notes, cubin_note, judge_library
from pipeline.status import Status

SPARK = Target(True, "sm_121a", (13, 0), "2.13.0", "linux_aarch64", (2, 39))

# cuobjdump 13.4's default listing of a library with an sm_90 cubin and compute_120 PTX (abridged)
LISTING = """
Fatbin elf code:
================
arch = sm_90
code version = [1,8]
host = linux
compile_size = 64bit

Fatbin ptx code:
================
arch = sm_120
code version = [9,0]
host = linux
compile_size = 64bit
compressed
ptxasOptions =
"""


def test_cuobjdumps_listing_gives_each_image_with_its_ptx_isa() -> None:
    assert _parse_headers([line.strip() for line in LISTING.splitlines()]) == [
        Image("cubin", "sm_90"),
        Image("ptx", "sm_120", (9, 0)),
    ]


@pytest.mark.parametrize(
    ("ptx", "runs"),
    [
        ("sm_90", True),  # plain PTX: any newer GPU
        ("sm_121", True),
        ("sm_122", False),
        ("sm_90a", False),  # arch-specific: only that GPU
        ("sm_121a", True),
        ("sm_120f", True),  # family: same major version, not newer
        ("sm_100f", False),
    ],
)
def test_which_ptx_the_driver_can_compile_for_sm_121(ptx: str, runs: bool) -> None:
    assert ptx_runs_on(ptx, "sm_121a") is runs


def test_a_library_without_device_code_is_not_judged() -> None:
    assert judge_library("lib/libhost.so", Inventory(()), SPARK) is None


def test_an_sm_120_cubin_serves_sm_121_and_unused_new_ptx_is_only_noted() -> None:
    inventory = Inventory((Image("cubin", "sm_120"), Image("ptx", "sm_120", (9, 1))))
    finding = judge_library("flashinfer/libgemm.so", inventory, SPARK)
    assert finding is not None and finding.status == "ok"
    assert finding.reason == (
        "cubins for sm_120; unused PTX newer than the driver's CUDA 13.0: sm_120 PTX 9.1 needs CUDA 13.1"
    )


def test_arch_specific_ptx_for_another_gpu_is_no_image() -> None:
    inventory = Inventory((Image("cubin", "sm_100a"), Image("ptx", "sm_100a", (8, 8))))
    finding = judge_library("vllm/_moe_C.abi3.so", inventory, SPARK)
    assert finding is not None and finding.status == "refused"
    assert finding.reason == "no image for sm_121a: cubins sm_100a, PTX sm_100a (PTX 8.8)"


@pytest.mark.parametrize(
    ("cubin", "loads"),
    [
        ("sm_120", True),  # plain: same major version, minor at most the target's
        ("sm_121", True),
        ("sm_122", False),
        ("sm_90", False),  # another major version never loads
        ("sm_100", False),
        ("sm_120f", True),  # family: within the family, at or before the target
        ("sm_100f", False),
        ("sm_121a", True),  # arch-specific: that GPU only
        ("sm_120a", False),
        ("sm_90a", False),
    ],
)
def test_which_cubins_load_on_sm_121(cubin: str, loads: bool) -> None:
    assert cubin_runs_on(cubin, "sm_121a") is loads


def test_the_rules_are_computed_for_any_target_not_listed_for_one() -> None:
    assert cubin_runs_on("sm_100f", "sm_103") and not cubin_runs_on("sm_103", "sm_100")
    assert cubin_runs_on("sm_86", "sm_89") and not cubin_runs_on("sm_89", "sm_90")


@pytest.mark.parametrize(
    ("tag", "problem"),
    [
        ("linux_aarch64", None),  # built on the host itself
        ("manylinux_2_28_aarch64", None),  # vLLM's and FlashInfer's wheels: glibc 2.28 <= 2.39
        ("manylinux_2_17_aarch64.manylinux2014_aarch64", None),  # a compressed tag set: one is enough
        ("manylinux2014_aarch64", None),
        ("any", None),
        ("manylinux_2_40_aarch64", "manylinux_2_40_aarch64 needs glibc 2.40, the profile's host has glibc 2.39"),
        ("manylinux_2_28_x86_64", "which does not install on linux_aarch64"),
        ("win_amd64", "which does not install on linux_aarch64"),
    ],
)
def test_a_platform_tag_is_judged_by_what_the_host_can_install(tag: str, problem: str | None) -> None:
    found = platform_problem(tag, "linux_aarch64", (2, 39))
    assert found is None if problem is None else (found is not None and problem in found), found


def test_a_library_upstream_builds_only_for_other_gpus_is_absent_by_design_not_refused() -> None:
    spark = replace(SPARK, absent_by_design={"vllm/_flashmla_C*.so": "FlashMLA: sm_90a and sm_100f by design"})
    inventory = Inventory((Image("cubin", "sm_90a"), Image("cubin", "sm_100f")))
    finding = judge_library("vllm/_flashmla_C.abi3.so", inventory, spark)
    assert finding is not None and finding.status == "absent"
    assert (
        finding.reason == "absent on sm_121a by design (FlashMLA: sm_90a and sm_100f by design): cubins sm_90a, sm_100f"
    )


def test_vllms_own_kernels_with_only_datacenter_images_are_still_refused_naming_the_library() -> None:
    spark = replace(SPARK, absent_by_design={"vllm/_flashmla_C*.so": "FlashMLA"})
    inventory = Inventory((Image("cubin", "sm_90"), Image("cubin", "sm_100f")))
    finding = judge_library("vllm/_C.abi3.so", inventory, spark)
    assert finding is not None and (finding.member, finding.status) == ("vllm/_C.abi3.so", "refused")
    assert finding.reason == "no image for sm_121a: cubins sm_90, sm_100f"


def test_a_family_cubin_serves_sm_121() -> None:
    inventory = Inventory((Image("cubin", "sm_90a"), Image("cubin", "sm_100f"), Image("cubin", "sm_120f")))
    finding = judge_library("vllm/_flashkda_C.abi3.so", inventory, SPARK)
    assert finding is not None and (finding.status, finding.reason) == ("ok", "cubins for sm_120f")


def test_bare_cubins_are_counted_and_those_that_cannot_load_are_left_to_the_jit() -> None:
    cubins = CubinSet(3, {"sm_100a": 2, "sm_120f": 1}, 1)
    assert cubin_note(cubins, SPARK) == (
        "3 cubins (sm_100a 2, sm_120f 1): 1 load on sm_121a; the kernels of the other 2 are JIT-compiled at first "
        "use (FlashInfer's JIT, which needs nvcc in the runtime)"
    )


def _report(name: str, version: str) -> WheelReport:
    return WheelReport(f"{name}-{version}.whl", name, version, Status.PASS, (), (), ())


def test_flashinfer_without_an_aot_kernel_wheel_runs_on_jit_and_the_inspection_says_so() -> None:
    (note,) = companion_notes([_report("vllm", "0.26.0"), _report("flashinfer-python", "0.6.14")])
    assert note.startswith("flashinfer-python 0.6.14 has no AOT kernel wheel tonight (flashinfer-cubin, ")
    assert "every FlashInfer kernel is JIT-compiled at first use" in note and "each boot's time includes it" in note
    with_kernels = [_report("flashinfer-python", "0.6.14"), _report("flashinfer-cubin", "0.6.14")]
    assert companion_notes(with_kernels) == []  # its own version's kernels: nothing to say
    other = companion_notes([_report("flashinfer-python", "0.6.14"), _report("flashinfer-cubin", "0.6.13")])
    assert other == [
        "flashinfer-cubin 0.6.13 beside flashinfer-python 0.6.14: FlashInfer ignores a companion of another version, "
        "so these kernels are JIT-compiled at first use"
    ]
    assert companion_notes([_report("vllm", "0.26.0")]) == []  # no FlashInfer built tonight
