"""A boot the engine refused for an instruction set: the host's where it has none of those named, else the build's."""

from __future__ import annotations

import pytest

from pipeline.checks.isa_refusal import host_lacks_for_refusal
from pipeline.checks.natives import HostIsa
from pipeline.errors import BootError
from pipeline.infra.server import classify_boot_failure
from pipeline.stages.prove.entry_run import boot_failure_ended
from pipeline.status import Status
from tests.unit.test_harness_pure import _REFUSED_ON_THIS_HOST
from tests.unit.test_natives import AMX, BASELINE, SKYLAKE, ZEN3, ZEN4

SPARK = HostIsa("aarch64", frozenset())


def _refused() -> BootError:
    """vLLM 0.32.0's own refusal of an FP8 KV cache, as the boot classifies it."""
    diagnosis = classify_boot_failure(_REFUSED_ON_THIS_HOST, 1)
    return BootError(diagnosis.cause, diagnosis.evidence, _REFUSED_ON_THIS_HOST)


def test_an_avx2_host_refused_an_fp8_kv_cache_is_inconclusive_and_names_the_host() -> None:
    ended = boot_failure_ended(_refused(), ZEN3)
    assert (ended.status, ended.stage) == (Status.INCONCLUSIVE, "boot"), ended
    assert ended.reason == (
        "this host cannot run the entry: exited: exit code 1, NotImplementedError: FP8 KV cache on CPU requires x86 "
        "with AVX-512 or AMX. (the engine requires AVX-512 or AMX; this host is x86_64 with AVX2, no AVX-512)"
    )
    assert ended.failures == ()  # blamed on nobody: no alert


@pytest.mark.parametrize("host", [ZEN4, SKYLAKE, AMX], ids=["zen4", "skylake", "amx"])
def test_the_same_refusal_on_a_host_that_has_what_it_names_is_the_builds(host: HostIsa) -> None:
    """The day that would fool a rule reading the message alone: a build that refuses on a host able to run it."""
    ended = boot_failure_ended(_refused(), host)
    assert (ended.status, ended.stage) == (Status.FAIL, "boot"), ended
    assert ended.reason == (
        "exited: exit code 1, NotImplementedError: FP8 KV cache on CPU requires x86 with AVX-512 or AMX."
    )


def test_a_host_of_another_machine_lacks_every_x86_instruction_set() -> None:
    lack = host_lacks_for_refusal("NotImplementedError: FP8 KV cache on CPU requires x86 with AVX-512 or AMX.", SPARK)
    assert lack == "the engine requires AVX-512 or AMX; this host is aarch64"


@pytest.mark.parametrize(
    "detail",
    [
        "exit code 1, RuntimeError: this build requires CUDA 13.0",  # a need, but no instruction set
        "exit code 1, RuntimeError: the AVX2 kernel returned NaN",  # an instruction set, but no need
        "exit code 1, NotImplementedError: this kernel requires AVX512_BF16",  # a narrower need than AVX-512 itself
        "exit code -4",
    ],
)
def test_a_failure_that_names_no_instruction_set_the_host_lacks_is_the_builds(detail: str) -> None:
    assert host_lacks_for_refusal(detail, ZEN3) is None and host_lacks_for_refusal(detail, BASELINE) is None
    assert boot_failure_ended(BootError("exited", detail), ZEN3).status == Status.FAIL


def test_a_refusal_naming_avx2_on_a_host_without_it_is_the_hosts() -> None:
    lack = host_lacks_for_refusal("exit code 1, RuntimeError: vLLM's CPU backend requires AVX2", BASELINE)
    assert lack == "the engine requires AVX2; this host is x86_64 with no AVX2, no AVX-512"
    assert host_lacks_for_refusal("exit code 1, RuntimeError: vLLM's CPU backend requires AVX2", ZEN3) is None
