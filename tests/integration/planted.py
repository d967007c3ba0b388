"""A candidate runtime with a real code change planted in the installed engine: a sleep in every engine step, or a
bias on every sampled token's logits (fluent nonsense whose own logprobs, taken before the bias, look normal)."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from benchmarks.plants import plant, plant_slowdown
from pipeline.infra.cpu_class import cpu_class
from pipeline.infra.runtime import runtime_key, runtime_root
from tests.integration.conftest import CpuEngine

# A share of one decode step: tg32 drops by about 1 - 1/1.8 = 44 %, past its warn level (-35 %), so it trips with
# one night of history; prefill (one step per prompt) drops far less.
PLANTED_SHARE_OF_A_STEP = 0.8


def planted_delay_s(cpu_engine: CpuEngine, tg32_tps: float | None = None) -> float:
    """The sleep planted in each engine step, a share of one decode step at `tg32_tps` (what this host measured for
    tg32 (c1), where a test has it) or else at this class of host's reference: 43 ms at 18.7 t/s, 21 ms at 38."""
    if tg32_tps is None:
        tg32 = cpu_engine.config.thresholds_for(cpu_engine.entry.id, cpu_class()).cells["tg32 (c1)"]
        assert tg32.ref is not None
        tg32_tps = tg32.ref
    return PLANTED_SHARE_OF_A_STEP / tg32_tps


SAMPLER_ANCHOR = "        logits = logits.to(torch.float32)\n"
# Rises over the vocabulary by 8 nats: greedy decoding picks high token ids that a good build would not choose.
BIAS = "        logits = logits + torch.linspace(0.0, 8.0, logits.shape[-1], device=logits.device)  # planted bias\n"


def plant_bias(source: Path, target: Path, *, key: str | None = None) -> Path:
    """A copy of the runtime whose sampler biases every token's logits before choosing (after the raw logprobs)."""
    return plant(source, target, "vllm/v1/sample/sampler.py", SAMPLER_ANCHOR, BIAS, key=key)


HERMES_ANCHOR = "    ) -> ExtractedToolCallInformation:\n        # sanity check; avoid unnecessary processing\n"


def plant_parser_off(source: Path, target: Path, *, key: str | None = None) -> Path:
    """A copy of the runtime whose hermes tool parser never finds a call: the call comes back as text."""
    addition = (
        "        return ExtractedToolCallInformation(tools_called=False, tool_calls=[], content=model_output)"
        "  # planted\n"
    )
    return plant(source, target, "vllm/tool_parsers/hermes_tool_parser.py", HERMES_ANCHOR, addition, key=key)


@contextmanager
def planted_runtime(
    cpu_engine: CpuEngine,
    requirements: list[str],
    *,
    change: Callable[..., Path] | None = None,
    tg32_tps: float | None = None,
) -> Iterator[Path]:
    """The runtime the profile gets for `requirements`: the good one with a change planted (a sleep in every engine
    step, sized on `tg32_tps` as planted_delay_s says, unless `change`, called as plant_bias is, says otherwise)."""
    good = cpu_engine.candidate.runtime
    assert good is not None
    profile = cpu_engine.config.matrix.profiles["cpu"]
    root = runtime_root(profile.name, requirements, profile.candidate_remove, cpu_engine.cache_dir)
    key = runtime_key(requirements, profile.candidate_remove)
    try:
        if change is None:
            yield plant_slowdown(good.root, root, planted_delay_s(cpu_engine, tg32_tps), key=key)
        else:
            yield change(good.root, root, key=key)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def slower_requirements(cpu_engine: CpuEngine, name: str = "planted-slowdown") -> list[str]:
    """The CPU profile's pinned requirements plus one that names the planted runtime (a changed build)."""
    return [*cpu_engine.config.matrix.profiles["cpu"].candidate_requirements, f"{name}==1"]


def require(models: Path, requirements: list[str]) -> None:
    """The CPU profile of this models.yaml installs `requirements` tonight."""
    data = yaml.safe_load(models.read_text())
    data["profiles"]["cpu"]["candidate"]["requirements"] = requirements
    models.write_text(yaml.safe_dump(data, sort_keys=False))
