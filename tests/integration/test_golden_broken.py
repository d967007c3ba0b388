"""Real broken models on the real CPU engine, each caught by the check meant for it, with no reference needed:
random weights by the garbage check, NaN weights by the logprobs check."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.broken_models import golden_on, make_broken, verdict
from tests.integration.conftest import CpuEngine

pytestmark = pytest.mark.integration


def test_random_weights_are_caught_as_garbage(cpu_engine: CpuEngine, tmp_path: Path) -> None:
    result = golden_on(cpu_engine, make_broken(cpu_engine, tmp_path, "random"), tmp_path, None)
    garbage = verdict(result, "garbage", "capital-of-france")
    assert garbage.status == "FAIL", garbage
    assert "mean token logprob" in garbage.reason
    assert verdict(result, "answer", "capital-of-france").status == "FAIL"


def test_nan_weights_are_caught_on_logprobs(cpu_engine: CpuEngine, tmp_path: Path) -> None:
    result = golden_on(cpu_engine, make_broken(cpu_engine, tmp_path, "nan"), tmp_path, None)
    logprobs = verdict(result, "logprobs", "capital-of-france")
    assert logprobs.status == "FAIL", logprobs
    assert "not finite (NaN or inf)" in logprobs.reason
    assert "Out of range float values" in str(logprobs.evidence["server_said"])
    counter = verdict(result, "nan counter", "vllm:corrupted_requests")
    assert counter.status in ("FAIL", "SKIPPED"), counter  # exported only by builds that count NaN requests
