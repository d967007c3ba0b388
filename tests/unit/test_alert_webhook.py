"""The webhook client's retries and its secrecy, answered by httpx's in-process transport (no socket)."""

from __future__ import annotations

import json
import logging

import httpx
import pytest

from pipeline.errors import WebhookError
from pipeline.infra.webhook import Webhook

URL = "https://hooks.slack.invalid/services/T0000/B0000/unitSecretPartOfTheWebhookUrl"


class Answers:
    """Answers the queued responses in order, then 200; records every request's JSON."""

    def __init__(self, *queued: httpx.Response | Exception) -> None:
        self.queued = list(queued)
        self.posted: list[dict[str, str]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.posted.append(json.loads(request.content))
        if self.queued:
            answer = self.queued.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer
        return httpx.Response(200, text="ok")


def _hook(answers: Answers, waits: list[float], said: list[str] | None = None) -> Webhook:
    return Webhook(
        URL,
        say=(said if said is not None else []).append,
        sleep=waits.append,
        transport=httpx.MockTransport(answers),
    )


def test_server_errors_back_off_and_a_429_waits_its_retry_after() -> None:
    answers = Answers(
        httpx.Response(502),
        httpx.Response(503),
        httpx.Response(429, headers={"Retry-After": "7"}, json={"retry_after": 7.0}),
    )
    waits: list[float] = []
    _hook(answers, waits).post({"text": "t", "content": "t"}, what="the alert k (opened)")
    assert waits == [1.0, 2.0, 7.0]
    assert answers.posted == [{"text": "t", "content": "t"}] * 4


def test_a_dropped_connection_is_retried_but_a_refusal_is_not() -> None:
    waits: list[float] = []
    _hook(Answers(httpx.ConnectError("connection refused")), waits).post({}, what="x")
    assert waits == [1.0]
    refused = Answers(httpx.Response(404, text="no_service"))
    with pytest.raises(WebhookError, match=r"^webhook: cannot deliver the alert k \(opened\): HTTP 404 Not Found"):
        _hook(refused, waits).post({}, what="the alert k (opened)")
    assert len(refused.posted) == 1 and waits == [1.0]


def test_a_lasting_outage_fails_naming_the_alert_and_never_the_url(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    answers = Answers(*[httpx.Response(500) for _ in range(10)])
    waits: list[float] = []
    said: list[str] = []
    with pytest.raises(WebhookError) as failure:
        _hook(answers, waits, said).post({}, what="the alert model:perf (updated, 2026-11-21)")
    assert str(failure.value) == (
        "webhook: cannot deliver the alert model:perf (updated, 2026-11-21): HTTP 500 Internal Server Error "
        "(attempt 5/5)"
    )
    assert waits == [1.0, 2.0, 4.0, 8.0]
    assert "HTTP Request: POST <webhook>" in caplog.text  # httpx's own line is there, masked
    secret = URL.rsplit("/", 1)[-1]
    assert all(secret not in text for text in [caplog.text, *said, str(failure.value), *failure.value.lines()])


def test_a_malformed_url_is_refused_without_being_quoted() -> None:
    with pytest.raises(WebhookError) as failure:
        Webhook("hooks.slack.invalid/unitSecretPartOfTheWebhookUrl")
    assert "unitSecret" not in str(failure.value)
