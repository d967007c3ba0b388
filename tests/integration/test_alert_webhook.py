"""Alerts to a chat webhook, received by a local HTTP server: one JSON post per event that Slack and Discord both
read, retried through 5xx and 429, kept for the next run when the receiver stays down, the URL never shown."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from pipeline.outcome import Failure, Outcome
from pipeline.places import RunDir
from pipeline.settings import Settings
from pipeline.stages.aftermath.alert import raise_alerts
from pipeline.stages.aftermath.alert_backends import deliver_alerts
from pipeline.status import Status
from tests.fakes.serving import serving

pytestmark = pytest.mark.integration

ENTRY = "smollm2-135m-instruct"
KEY = f"{ENTRY}:golden"
SECRET_PATH = "/api/webhooks/123456/integrationSecretPartOfTheWebhookUrl"


@dataclass
class Receiver:
    """What the webhook receiver got, and the failures it is told to answer first."""

    url: str = ""
    posts: list[dict[str, Any]] = field(default_factory=list)
    failures: list[tuple[int, dict[str, str]]] = field(default_factory=list)  # (status, headers), answered in order
    lock: threading.Lock = field(default_factory=threading.Lock)


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet: the tests read the receiver
            return

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with receiver.lock:
                failure = receiver.failures.pop(0) if receiver.failures else None
                if failure is None and self.path == SECRET_PATH:
                    receiver.posts.append(json.loads(body))
            status, headers = failure or ((204, {}) if self.path == SECRET_PATH else (404, {}))
            self.send_response(status)  # 204 as Discord answers; Slack's 200 "ok" is as good
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", "0")
            self.end_headers()

    return Handler


@pytest.fixture()
def receiver() -> Iterator[Receiver]:
    state = Receiver()
    with serving(_handler(state), "webhook-receiver") as server:
        state.url = f"http://127.0.0.1:{server.server_address[1]}{SECRET_PATH}"
        yield state


def _outcome(status: Status) -> Outcome:
    if status == Status.PASS:
        return Outcome(ENTRY, status, "golden", "12 prompts agree", True, 40.0)
    failure = Failure(KEY, "golden", "3 of 12 prompts diverge", {"diverged": 3})
    return Outcome(ENTRY, status, "golden", "3 of 12 prompts diverge", True, 40.0, {}, (failure,))


@dataclass
class Nights:
    receiver: Receiver
    root: Path
    said: list[str] = field(default_factory=list)
    waits: list[float] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def run(self, night: str, status: Status) -> list[str]:
        state = self.root / "history" / "alerts.json"
        events = raise_alerts(
            [_outcome(status)], night=night, run_id=f"run-{night}", state_path=state, suspects="vllm a..b"
        )
        problems = deliver_alerts(
            events,
            settings=Settings(alert_target="webhook", alert_webhook_url=self.receiver.url),
            state_path=state,
            run=RunDir(self.root / "runs" / night),
            say=self.said.append,
            environ={},
            sleep=self.waits.append,
        )
        self.problems += problems
        return problems


@pytest.fixture()
def nights(receiver: Receiver, tmp_path: Path) -> Nights:
    return Nights(receiver, tmp_path)


def test_each_event_is_one_post_that_slack_and_discord_both_read(nights: Nights) -> None:
    for night, status in [("2026-11-20", Status.FAIL), ("2026-11-21", Status.FAIL), ("2026-11-22", Status.PASS)]:
        assert nights.run(night, status) == []
    posts = nights.receiver.posts
    assert [p["content"].split(":")[0] for p in posts] == [
        "spark-nightly new alert",
        "spark-nightly still failing",
        "spark-nightly resolved",
    ]
    assert all(set(p) == {"text", "content"} and p["text"] == p["content"] for p in posts)
    assert "3 of 12 prompts diverge" in posts[0]["text"]


@pytest.mark.parametrize(
    ("failures", "expected_waits"),
    [
        ([(500, {}), (502, {})], [1.0, 2.0]),
        ([(429, {"Retry-After": "3"})], [3.0]),
    ],
)
def test_a_5xx_or_429_is_retried_and_delivered_once(
    nights: Nights, failures: list[tuple[int, dict[str, str]]], expected_waits: list[float]
) -> None:
    nights.receiver.failures = list(failures)
    assert nights.run("2026-11-20", Status.FAIL) == []
    assert nights.waits == expected_waits and len(nights.receiver.posts) == 1


def test_a_receiver_down_all_night_gets_the_alert_on_the_next_run(
    nights: Nights, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    nights.receiver.failures = [(503, {})] * 5
    (problem,) = nights.run("2026-11-20", Status.FAIL)
    assert problem.startswith(f"alert {KEY} (opened, 2026-11-20) not delivered to webhook: webhook: cannot deliver")
    assert "HTTP 503 Service Unavailable" in problem and problem.endswith("kept pending for the next run")
    assert nights.receiver.posts == []
    assert nights.run("2026-11-21", Status.FAIL) == []
    assert [p["content"].split(":")[0] for p in nights.receiver.posts] == [
        "spark-nightly new alert",  # the pending one first
        "spark-nightly still failing",
    ]
    secret = SECRET_PATH.rsplit("/", 1)[-1]
    seen = [*nights.said, *nights.problems, caplog.text, (nights.root / "history" / "alerts.json").read_text()]
    seen += [p.read_text() for p in (nights.root / "runs").rglob("*.md")]
    assert seen  # not empty: an assert over nothing passes
    assert "HTTP Request: POST" in caplog.text and all(secret not in text for text in seen)
