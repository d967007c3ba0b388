"""The kernel path on the real CPU engine forced off the CPU entry's declared kernels: another attention backend (which
vLLM's CPU platform refuses, and runs its own) and an FP8 KV cache. The golden stage's evidence (the server's log and
/metrics) FAILs each, naming expected and actual; where vLLM keeps no FP8 KV cache (an AVX2-only host), the boot
fails naming vLLM's reason, and the night names the host, not the build; the good build's pass is in the nightly's
golden stage (served/test_golden_real.py)."""

from __future__ import annotations

import platform
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

import pytest

from pipeline.checks.kernels import check_kernels
from pipeline.checks.natives import HostIsa
from pipeline.config.matrix import ModelEntry
from pipeline.errors import BootError
from pipeline.infra.cpu_class import cpu_class, cpu_flags
from pipeline.stages.prove.boot import boot
from pipeline.stages.prove.entry_run import boot_failure_ended
from pipeline.stages.prove.golden_run import ServerLog, kernel_evidence
from pipeline.status import Status
from tests.integration.conftest import CpuEngine

pytestmark = pytest.mark.integration


# vLLM's CPU engine keeps an FP8 KV cache only on x86 with AVX-512 or AMX; on an AVX2-only host it refuses to boot
FP8_KV_CACHE_CLASSES = ("avx512", "amx")


def test_a_forced_other_attention_backend_and_kv_cache_dtype_fail_naming_expected_and_actual(
    cpu_engine: CpuEngine, tmp_path: Path
) -> None:
    declared = cpu_engine.entry.kernels
    assert declared == {"attention": "CPU_ATTN", "kv_cache_dtype": "auto"}  # models.yaml's CPU entry
    fp8_here = cpu_class() in FP8_KV_CACHE_CLASSES
    forced = _forced(cpu_engine, attention_backend="TRITON_ATTN", **({"kv_cache_dtype": "fp8"} if fp8_here else {}))
    with boot(forced, cpu_engine.candidate, cache_dir=cpu_engine.cache_dir, log_dir=tmp_path / "forced") as server:
        evidence = kernel_evidence(server.client, ServerLog(server.log_path, "cpu"))
    found = {v.subject: v for v in check_kernels(declared, evidence)}
    attention, cache = found["attention"], found["kv_cache_dtype"]
    assert attention.status == "FAIL", attention
    # vLLM 0.32's own words: "Cannot use AttentionBackendEnum.TRITON_ATTN backend on CPU."
    assert "the server refused TRITON_ATTN" in attention.reason and "ran CPU_ATTN" in attention.reason, attention
    assert "Cannot use AttentionBackendEnum.TRITON_ATTN backend on CPU." in attention.reason
    if fp8_here:
        assert cache.status == "FAIL", cache
        assert "expected auto, /metrics says the KV cache is fp8" in cache.reason, cache
        return
    # The KV cache was left as declared on this host, and its check does not blame it
    assert cache.status == "PASS", cache
    # An FP8 KV cache forced here is refused by vLLM at boot, and the boot's error names vLLM's own reason
    refused = _forced(cpu_engine, kv_cache_dtype="fp8")
    with (
        pytest.raises(BootError) as caught,
        boot(refused, cpu_engine.candidate, cache_dir=cpu_engine.cache_dir, log_dir=tmp_path / "fp8"),
    ):
        pass
    assert "NotImplementedError: FP8 KV cache on CPU requires x86 with AVX-512 or AMX." in str(caught.value)
    # and the night names the host for it, blaming nobody: the same build serves this entry where the host has them
    ended = boot_failure_ended(caught.value, HostIsa(platform.machine(), cpu_flags()))
    assert (ended.status, ended.stage) == (Status.INCONCLUSIVE, "boot"), ended
    assert "(the engine requires AVX-512 or AMX; this host is x86_64 with AVX2, no AVX-512)" in ended.reason, ended


def _forced(cpu_engine: CpuEngine, **serve: str) -> ModelEntry:
    """The CPU entry with serve options forced off its declared kernels."""
    return replace(cpu_engine.entry, serve=MappingProxyType({**cpu_engine.entry.serve, **serve}))
