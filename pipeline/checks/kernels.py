"""Kernel-path evidence: the backends an entry must run on (attention, MoE, linear kernel, KV-cache dtype) against
what the server's log and /metrics say it selected. A silent fallback (another MoE backend, FP8 KV cache not in use,
a backend asked for and refused) shows otherwise only as a speed change, if at all.

The patterns read vLLM's own selection lines (0.32 and 0.33 word them alike):
- vllm/platforms/cuda.py: `Using %s attention backend out of potential backends: ...`, `Using %s backend.` for one
  asked for; vllm/platforms/cpu.py: `Cannot use %s backend on CPU.`;
- the MoE oracles under vllm/model_executor/layers/fused_moe/oracle/: `Using FLASHINFER_CUTLASS Fp8 MoE backend out
  of ...`, `Using 'MARLIN' WNA16 MoE backend.`;
- vllm/model_executor/kernels/linear/: `Selected %s for %s`, `Using %s for NVFP4 GEMM`;
- /metrics: `vllm:cache_config_info`, whose `cache_dtype` label is the KV cache's dtype.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from pipeline.checks import Verdict, failed, passed, skipped
from pipeline.infra.openai_client import MetricSample

CACHE_INFO_METRIC = "vllm:cache_config_info"

_NAME = r"'?(?:AttentionBackendEnum\.)?(?P<name>[A-Za-z][\w.-]*?)'?"
SELECTIONS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("attention", re.compile(rf"Using {_NAME} attention backend out of potential backends")),
    ("attention", re.compile(rf"Using {_NAME} backend\.\s*$")),
    ("vision_attention", re.compile(rf"Using backend {_NAME} for vit attention")),
    ("moe", re.compile(rf"Using {_NAME} (?:[A-Z][A-Za-z0-9]*|W4A8 Int8) MoE backend(?: out of|\.)")),
    ("moe", re.compile(rf"Using {_NAME} backend for \w+ MoE")),  # the older oracle's wording
    # "Selected X for Fp8LinearMethod" (scaled-mm paths); "Using X for NVFP4 GEMM", "... for mixed-precision linear",
    # "... for AutoGPTQLinearMethod" (the others): every linear kernel class ends in Kernel
    ("linear", re.compile(r"(?:Selected|Using) (?P<name>\w+Kernel) for \S")),
)
REFUSALS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("attention", re.compile(rf"Cannot use {_NAME} backend on \w+\.")),
)
# What a platform selects without a line of its own: vLLM's CPU platform returns CPU_ATTN for every model without
# MLA and says nothing (vllm/platforms/cpu.py, get_attn_backend_cls); it names only a backend it refuses.
SILENT_CHOICES: Mapping[str, Mapping[str, str]] = {"cpu": {"attention": "CPU_ATTN"}}


@dataclass(frozen=True)
class Sighting:
    """One line of the server's log naming a kernel it selected (or refused), with where it stands."""

    component: str
    name: str
    line: int
    text: str
    refused: bool = False

    def cited(self) -> str:
        return f"log line {self.line}: {self.text!r}"


def read_log(text: str) -> tuple[Sighting, ...]:
    """Every selection and refusal the log states, in order."""
    found: list[Sighting] = []
    for number, line in enumerate(text.splitlines(), start=1):
        for refused, patterns in ((False, SELECTIONS), (True, REFUSALS)):
            for component, pattern in patterns:
                match = pattern.search(line)
                if match:
                    found.append(Sighting(component, match["name"], number, _trimmed(line, match.start()), refused))
                    break
    return tuple(found)


def cache_dtype(samples: Sequence[MetricSample]) -> str | None:
    """The KV cache's dtype from the server's `vllm:cache_config_info` labels; None where it exports none."""
    labelled = (s.labels for s in samples if s.name == CACHE_INFO_METRIC)
    return next((labels["cache_dtype"] for labels in labelled if "cache_dtype" in labels), None)


@dataclass(frozen=True)
class KernelEvidence:
    """What the server said about its kernels: its log's lines and its /metrics cache dtype."""

    sightings: tuple[Sighting, ...]
    cache_dtype: str | None
    log_name: str  # the log read, as the verdict names it
    platform: str  # the profile's accelerator: which silent choices apply


def check_kernels(expected: Mapping[str, str | Sequence[str]], evidence: KernelEvidence | None) -> list[Verdict]:
    """One verdict per declared component: PASS when what the server selected is what the entry declares; FAIL
    naming expected and actual when it differs, when a backend asked for was refused, or when nothing names it.
    Without evidence (a server started elsewhere, whose log is not ours) each is SKIPPED, saying so."""
    if evidence is None:
        return [skipped("kernel path", c, "not a server this run started: its log is not ours") for c in expected]
    return [_judge(component, _names(want), evidence) for component, want in expected.items()]


def _judge(component: str, want: frozenset[str], evidence: KernelEvidence) -> Verdict:
    if component == "kv_cache_dtype":
        return _judge_cache_dtype(want, evidence)
    expected = _listed(want)
    seen = [s for s in evidence.sightings if s.component == component]
    refusals = [s for s in seen if s.refused]
    chosen = [s for s in seen if not s.refused]
    actual = frozenset(s.name for s in chosen)
    silent = SILENT_CHOICES.get(evidence.platform, {}).get(component)
    if not actual and silent is not None:
        actual = frozenset({silent})
        how = f"vLLM's {evidence.platform} platform selects {silent} without a line; {evidence.log_name} names no other"
    else:
        cited = "; ".join(s.cited() for s in _first_of_each(chosen))
        how = cited or f"{evidence.log_name} names no {component} kernel"
    if refusals:
        asked = _listed(frozenset(s.name for s in refusals))
        return failed(
            "kernel path",
            component,
            f"expected {expected}; the server refused {asked}, which it was asked for, and ran "
            f"{_listed(actual) or 'something else'} ({refusals[0].cited()})",
            expected=sorted(want),
            actual=sorted(actual),
            refused=[s.text for s in refusals],
        )
    if not actual:
        return failed(
            "kernel path",
            component,
            f"expected {expected}; {how} (vLLM may have reworded it: the patterns are in pipeline/checks/kernels.py)",
            expected=sorted(want),
        )
    if _folded(actual) != _folded(want):
        return failed(
            "kernel path",
            component,
            f"expected {expected}, the server selected {_listed(actual)} ({how})",
            expected=sorted(want),
            actual=sorted(actual),
        )
    return passed("kernel path", component, f"{_listed(actual)} as declared ({how})", actual=sorted(actual))


def _judge_cache_dtype(want: frozenset[str], evidence: KernelEvidence) -> Verdict:
    expected, actual = _listed(want), evidence.cache_dtype
    if actual is None:
        return failed(
            "kernel path", "kv_cache_dtype", f"expected {expected}; /metrics has no {CACHE_INFO_METRIC} cache_dtype"
        )
    if _folded({actual}) != _folded(want):
        return failed(
            "kernel path",
            "kv_cache_dtype",
            f"expected {expected}, /metrics says the KV cache is {actual} ({CACHE_INFO_METRIC} cache_dtype)",
            expected=sorted(want),
            actual=[actual],
        )
    return passed("kernel path", "kv_cache_dtype", f"{actual} as declared (/metrics {CACHE_INFO_METRIC})")


def _names(want: str | Sequence[str]) -> frozenset[str]:
    return frozenset([want] if isinstance(want, str) else want)


def _folded(names: Iterable[str]) -> frozenset[str]:
    """Names compared without case: vLLM's older MoE line says "Triton" where its enums say TRITON."""
    return frozenset(name.casefold() for name in names)


def _listed(names: frozenset[str]) -> str:
    return " and ".join(sorted(names))


def _first_of_each(sightings: Sequence[Sighting]) -> list[Sighting]:
    """One line per name (each tensor-parallel worker states its own)."""
    firsts: dict[str, Sighting] = {}
    for sighting in sightings:
        firsts.setdefault(sighting.name, sighting)
    return list(firsts.values())


def _trimmed(line: str, start: int) -> str:
    """The line from its statement on: the process prefix and timestamp say nothing of the kernel."""
    return line[start:].strip()[:240]
