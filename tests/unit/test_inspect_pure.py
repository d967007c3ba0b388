"""The architecture rules of inspection and cuobjdump's listing format, without running anything."""

from __future__ import annotations

import pytest

from pipeline.infra.fatbin import Image, Inventory, _parse_headers
from pipeline.stages.build.inspect import Target, judge_library, ptx_runs_on

SPARK = Target(True, "sm_121a", ("sm_121", "sm_121a", "sm_120", "sm_120a"), (13, 0), "2.13.0", "linux_aarch64")

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
