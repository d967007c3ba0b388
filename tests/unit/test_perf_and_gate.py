"""Perf arithmetic on recorded request timings (llama-benchy's definitions) and the reference gate."""

from __future__ import annotations

import math

import pytest

from pipeline.config.thresholds import Level, Reference
from pipeline.stages.prove.corpus import corpus_text
from pipeline.stages.prove.perf.gate import judge_cell
from pipeline.stages.prove.perf.measure import RequestSample, RunSample, counted_prompt_tokens


def _request(start: float, tokens: int, gap: float, *, prompt: int = 100, ttfr: float = 0.2) -> RequestSample:
    times = tuple(start + i * gap for i in range(tokens))
    return RequestSample(prompt, tokens, ttfr, ttfr + 0.01, ttfr - 0.05, times[0], times[-1], times)


def test_request_throughputs_follow_llama_benchy() -> None:
    sample = _request(0.3, 33, 0.05)  # 33 tokens, 50 ms apart: 32 intervals in 1.6 s
    assert sample.tg_tps == pytest.approx(20.0)
    assert sample.pp_tps == pytest.approx(100 / 0.15)
    assert math.isnan(_request(0.3, 1, 0.05).tg_tps)  # one token has no decode span


def test_run_totals_add_requests_over_the_shared_span() -> None:
    run = RunSample((_request(0.3, 33, 0.05), _request(0.3, 33, 0.05)))
    assert run.tg_tps == pytest.approx(40.0)
    assert run.pp_tps == pytest.approx(200 / 0.15)
    assert run.peak_tps == 42.0  # tokens 0.0 s..1.0 s after the first, of both requests: 21 each
    assert run.metric("ttfr") == pytest.approx(200.0)  # ms


def _reference(**changes: object) -> Reference:
    values: dict[str, object] = {
        "cell": "tg32",
        "metric": "tg_tps",
        "ref": 50.0,
        "unit": "t/s",
        "warn": Level.parse("-5%"),
        "fail": Level.parse("-10%"),
    }
    values.update(changes)
    return Reference(**values)  # type: ignore[arg-type]


def test_the_gate_judges_the_median_against_warn_and_fail_bounds() -> None:
    assert judge_cell(_reference(), [49.0, 51.0, 50.0]).status == "PASS"
    warn = judge_cell(_reference(), [47.0, 47.0, 60.0])
    assert (warn.status, warn.value, warn.warn_bound) == ("WARN", 47.0, 47.5)
    fail = judge_cell(_reference(), [44.0, 44.5, 45.5])
    assert fail.status == "FAIL" and fail.reason == "44.5 t/s vs 50 (-11.0%) is past the fail level -10% (45)"
    assert fail.change == pytest.approx(-0.11)


def test_latency_cells_fail_upwards_and_xfail_and_pending_are_reported_as_such() -> None:
    latency = _reference(metric="e2e_ttft", unit="ms", ref=100.0, warn=Level.parse("+10%"), fail=Level.parse(130))
    assert judge_cell(latency, [95.0]).status == "PASS"
    assert judge_cell(latency, [140.0]).status == "FAIL"
    assert judge_cell(_reference(xfail="known: issue 42"), [10.0]).status == "XFAIL"
    pending = judge_cell(_reference(ref=None, pending="not measured yet"), [10.0])
    assert pending.status == "PENDING" and "not measured yet" in pending.reason


def test_the_corpus_is_long_generated_prose_and_the_same_every_time() -> None:
    text = corpus_text()
    assert len(text.split()) >= 24_000
    assert text == corpus_text()
    assert text.count("\n\n") > 100


def test_prompt_tokens_are_counted_as_llama_benchy_counts_them() -> None:
    assert counted_prompt_tokens(98, 128) == 98  # the template's 30 tokens are more than 20 % of a short prompt
    assert counted_prompt_tokens(2018, 2048) == 2048  # within 20 %: the server's count
    assert counted_prompt_tokens(98, 0) == 98  # no usage in the stream
