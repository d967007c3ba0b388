"""The golden stage's serving features on builds broken for them: the real CPU engine with its grammar ignored, and
with its tool parser finding no call. Each FAILs the features it breaks, saying what came back; the good build's
pass is in served/test_golden_real.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks.plants import plant_grammar_ignored
from pipeline.checks import Verdict
from pipeline.stages.prove.boot import Candidate, boot
from pipeline.stages.prove.features import feature_checks
from tests.integration.conftest import CpuEngine
from tests.integration.planted import plant_parser_off, planted_runtime, slower_requirements

pytestmark = pytest.mark.integration


def _features_of(cpu_engine: CpuEngine, change: Callable[..., Path], name: str, tmp_path: Path) -> list[Verdict]:
    """The feature checks against the CPU entry served by a runtime with `change` planted."""
    good = cpu_engine.candidate.runtime
    assert good is not None
    with planted_runtime(cpu_engine, slower_requirements(cpu_engine, name), change=change) as root:
        candidate = Candidate(cpu_engine.candidate.profile, runtime=replace(good, root=root))
        with boot(cpu_engine.entry, candidate, cache_dir=cpu_engine.cache_dir, log_dir=tmp_path) as server:
            return feature_checks(server.client, cpu_engine.entry)


def _by_subject(verdicts: list[Verdict]) -> dict[str, Verdict]:
    return {f"{v.check}: {v.subject}": v for v in verdicts}


def test_a_build_that_ignores_the_grammar_fails_the_forced_call_and_the_json_schema(
    cpu_engine: CpuEngine, tmp_path: Path
) -> None:
    found = _by_subject(_features_of(cpu_engine, plant_grammar_ignored, "planted-grammar-ignored", tmp_path))
    # vLLM sees the first token its grammar would have masked ("grammar rejected tokens ... Terminating request")
    # and answers 500: each feature that needs the grammar fails, quoting that answer
    for subject in (
        "forced tool call: get_weather (required)",
        "forced tool call: get_weather (named)",
        "JSON schema: capital",
    ):
        assert found[subject].status == "FAIL", found[subject]
        assert "answered 500" in found[subject].reason or "the answer " in found[subject].reason, found[subject]


def test_a_build_whose_parser_finds_no_call_fails_the_forced_call_with_the_call_it_missed(
    cpu_engine: CpuEngine, tmp_path: Path
) -> None:
    found = _by_subject(_features_of(cpu_engine, plant_parser_off, "planted-parser-off", tmp_path))
    for forced in ("forced tool call: get_weather (required)", "forced tool call: get_weather (named)"):
        assert found[forced].status == "FAIL", found[forced]
        assert "the answer was '<tool_call>" in found[forced].reason, found[forced]
    assert found["JSON schema: capital"].status == "PASS"  # the grammar itself still holds
