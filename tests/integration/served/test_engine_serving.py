"""The real vLLM CPU engine through the harness: identity, greedy answer, streaming, logprobs, /metrics."""

from __future__ import annotations

import itertools
import math

import pytest

from pipeline.infra.openai_client import metric_total
from pipeline.infra.server import Server
from tests.integration.conftest import CpuEngine

pytestmark = pytest.mark.integration

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def test_the_server_reports_the_configured_identity(cpu_server: Server, cpu_engine: CpuEngine) -> None:
    models = cpu_server.client.models()
    assert [m.id for m in models] == [cpu_engine.entry.served_model_name]
    assert models[0].max_model_len == cpu_engine.entry.serve["max_model_len"]
    assert cpu_server.warmup.completion_tokens > 0  # readiness included a real completion


def test_the_greedy_answer_is_the_golden_one(cpu_server: Server, cpu_engine: CpuEngine) -> None:
    prompt = cpu_engine.config.golden[cpu_engine.entry.golden].prompts[0]
    expectation = prompt.expectation_for("vllm", cpu_engine.entry.dtype)
    assert expectation is not None and expectation.exact is not None
    answer = cpu_server.client.chat(
        cpu_server.model, [{"role": "user", "content": prompt.prompt}], max_tokens=prompt.max_tokens
    )
    assert answer.text == expectation.exact
    assert answer.finish_reason == "stop"


def test_streaming_arrives_in_timestamped_chunks_that_add_up_to_the_plain_answer(cpu_server: Server) -> None:
    plain = cpu_server.client.chat(cpu_server.model, QUESTION, max_tokens=24)
    chunks = list(
        cpu_server.client.stream(
            "/v1/chat/completions",
            {"model": cpu_server.model, "messages": QUESTION, "max_tokens": 24, "temperature": 0},
        )
    )
    assert len(chunks) >= 3
    assert all(a.at <= b.at for a, b in itertools.pairwise(chunks))
    assert "".join(c.text for c in chunks) == plain.text


def test_logprobs_come_back_finite_for_chat_and_completions(cpu_server: Server) -> None:
    chat = cpu_server.client.chat(cpu_server.model, QUESTION, max_tokens=12, top_logprobs=5)
    assert len(chat.logprobs) == chat.completion_tokens
    assert all(t.logprob is not None and math.isfinite(t.logprob) for t in chat.logprobs)
    assert all(len(t.top) == 5 for t in chat.logprobs)
    completion = cpu_server.client.complete(cpu_server.model, "The capital of France is", max_tokens=8, logprobs=3)
    assert len(completion.logprobs) == completion.completion_tokens
    assert all(t.logprob is not None and math.isfinite(t.logprob) for t in completion.logprobs)


def test_two_identical_greedy_requests_give_identical_logprobs(cpu_server: Server) -> None:
    first = cpu_server.client.chat(cpu_server.model, QUESTION, max_tokens=12, top_logprobs=2)
    second = cpu_server.client.chat(cpu_server.model, QUESTION, max_tokens=12, top_logprobs=2)
    assert [(t.token, t.logprob) for t in first.logprobs] == [(t.token, t.logprob) for t in second.logprobs]


def test_metrics_count_the_generated_tokens(cpu_server: Server) -> None:
    before = metric_total(cpu_server.client.metrics(), "vllm:generation_tokens_total")
    answer = cpu_server.client.chat(cpu_server.model, QUESTION, max_tokens=16)
    after = metric_total(cpu_server.client.metrics(), "vllm:generation_tokens_total")
    assert before is not None and after is not None
    assert after - before == answer.completion_tokens
