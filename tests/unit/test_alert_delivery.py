"""Alert delivery without a network: GitHub and webhook bodies against golden files, and the outbox in alerts.json
that keeps an undelivered alert for the next run, in order, without ever losing or repeating one."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pipeline.errors import SparkNightlyError
from pipeline.outcome import Failure, Outcome
from pipeline.places import RunDir
from pipeline.settings import Settings
from pipeline.stages.aftermath.alert import AlertEvent, raise_alerts
from pipeline.stages.aftermath.alert_backends import (
    GIVE_UP_AFTER_RUNS,
    STOP_AFTER_FAILURES,
    comment_body,
    deliver_alerts,
    issue_body,
    webhook_payload,
)
from pipeline.status import Status

GOLDEN = Path(__file__).parents[1] / "data" / "alerts"
SUSPECTS = (
    "vllm main 0123456789ab..fedcba987654 (https://github.com/vllm-project/vllm/compare/0123456789ab...fedcba987654)"
)
ENTRY = "smollm2-135m-instruct"
KEY = f"{ENTRY}:perf"
TOKEN = "ghp_unitTestTokenThatMustNeverBeShown0123456789"


def _failing(entry: str = ENTRY) -> Outcome:
    failure = Failure(
        f"{entry}:perf",
        "tg32 (c1) tg_tps",
        "B/A 0.7262 over 8 pairs is below 0.98 and significant",
        {"value": 13.1, "ref": 18.7},
        subject="tg32 (c1)",
    )
    return Outcome(entry, Status.FAIL, "perf", "tg32 (c1): tripped twice", True, 301.5, {}, (failure,))


def _passing(entry: str = ENTRY) -> Outcome:
    return Outcome(entry, Status.PASS, "perf", "4 cells within their references", True, 280.0)


def _events(state: Path, night: str, *outcomes: Outcome, crash: str | None = None) -> list[AlertEvent]:
    return raise_alerts(
        list(outcomes), night=night, run_id=f"run-{night}", state_path=state, suspects=SUSPECTS, crash=crash
    )


def _history(tmp_path: Path) -> dict[str, AlertEvent]:
    """One alert's life: a good night, opened, updated, closed; and a pipeline crash."""
    state = tmp_path / "alerts.json"
    _events(state, "2026-11-19", _passing())
    (opened,) = _events(state, "2026-11-20", _failing())
    (updated,) = _events(state, "2026-11-21", _failing())
    (closed,) = _events(state, "2026-11-22", _passing())
    (crash,) = _events(state, "2026-11-23", crash="Traceback (most recent call last):\nKeyError: 'cells'")
    return {"opened": opened, "updated": updated, "closed": closed, "crash": crash}


@pytest.mark.parametrize(
    ("golden", "render"),
    [
        ("github-issue.opened.md", lambda h: issue_body(h["opened"])),
        ("github-comment.updated.md", lambda h: comment_body(h["updated"])),
        ("github-comment.closed.md", lambda h: comment_body(h["closed"])),
        ("github-issue.pipeline-failure.md", lambda h: issue_body(h["crash"])),
        ("webhook.opened.json", lambda h: json.dumps(webhook_payload(h["opened"]), indent=2) + "\n"),
        ("webhook.closed.json", lambda h: json.dumps(webhook_payload(h["closed"]), indent=2) + "\n"),
    ],
)
def test_remote_bodies_match_their_golden_files(tmp_path: Path, golden: str, render: object) -> None:
    assert callable(render)
    assert render(_history(tmp_path)) == (GOLDEN / golden).read_text()


def test_a_webhook_message_fits_discord_and_slack_however_long_the_crash() -> None:
    event = AlertEvent("pipeline", "opened", "spark-nightly pipeline failure", "x" * 9000, "2026-11-23", "r")
    payload = webhook_payload(event)
    assert len(payload["content"]) == 2000 and payload["content"].endswith("…")
    assert len(payload["text"]) == 3900 and payload["text"].startswith("spark-nightly new alert: ")


@dataclass
class FakeBackend:
    """A remote backend that refuses the keys (or everything) it is told to, and records what it got."""

    refuse: set[str] = field(default_factory=set)
    refuse_all: bool = False
    name: str = "github"
    delivered: list[tuple[str, str, str, int | None]] = field(default_factory=list)
    tried: list[str] = field(default_factory=list)

    def deliver(self, event: AlertEvent, issue: int | None) -> int | None:
        self.tried.append(event.key)
        if self.refuse_all or event.key in self.refuse:
            raise SparkNightlyError(f"GitHub: cannot comment on issue #{issue}: HTTP 502 Server Error")
        self.delivered.append((event.key, event.action, event.night, issue))
        return issue if issue is not None else 100 + len(self.delivered)


def _deliver(
    tmp_path: Path, events: list[AlertEvent], backend: FakeBackend, said: list[str], target: str = "github"
) -> list[str]:
    settings = Settings(alert_target=target, alert_repo="spark-nightly/wheels", github_token_env="UNIT_TOKEN")
    night = events[0].night if events else "later"
    return deliver_alerts(
        events,
        settings=settings,
        state_path=tmp_path / "alerts.json",
        run=RunDir(tmp_path / "runs" / night),
        say=said.append,
        environ={"UNIT_TOKEN": TOKEN},
        backend=backend,
    )


def _pending(tmp_path: Path) -> list[tuple[str, str, int]]:
    state = json.loads((tmp_path / "alerts.json").read_text())
    return [(r["event"]["key"], r["event"]["night"], r["attempts"]) for r in state.get("pending", {}).get("github", [])]


def test_an_undelivered_alert_stays_pending_and_goes_first_on_the_next_run(tmp_path: Path) -> None:
    state, said = tmp_path / "alerts.json", []
    down = FakeBackend(refuse_all=True)
    problems = _deliver(tmp_path, _events(state, "2026-11-20", _failing()), down, said)
    assert len(problems) == 1 and KEY in problems[0] and "kept pending for the next run" in problems[0]
    assert (tmp_path / "runs" / "2026-11-20" / "alerts").is_dir()  # the Markdown is written whatever happens remotely
    assert _pending(tmp_path) == [(KEY, "2026-11-20", 1)]
    assert said[-1] == "alerts: 1 kept pending for github; they are delivered on the next run"
    up = FakeBackend()
    assert _deliver(tmp_path, _events(state, "2026-11-21", _failing()), up, said) == []
    # the opening goes first and its issue number carries on to the update
    assert up.delivered == [(KEY, "opened", "2026-11-20", None), (KEY, "updated", "2026-11-21", 101)]
    assert _pending(tmp_path) == []
    assert json.loads(state.read_text())["alerts"][KEY]["issue"] == 101


def test_a_refused_key_holds_back_only_its_own_later_events(tmp_path: Path) -> None:
    state, said = tmp_path / "alerts.json", []
    other = "tinyllama:perf"
    _deliver(tmp_path, _events(state, "2026-11-20", _failing(), _failing("tinyllama")), FakeBackend(refuse={KEY}), [])
    picky = FakeBackend(refuse={KEY})
    problems = _deliver(tmp_path, _events(state, "2026-11-21", _failing(), _failing("tinyllama")), picky, said)
    assert picky.tried == [KEY, other]  # the key's update is not tried while its opening is refused
    assert [(k, a) for k, a, _, _ in picky.delivered] == [(other, "updated")]
    assert [(k, n) for k, n, _ in _pending(tmp_path)] == [(KEY, "2026-11-20"), (KEY, "2026-11-21")]
    assert len(problems) == 1


def test_after_repeated_failures_the_rest_waits_without_being_tried(tmp_path: Path) -> None:
    state = tmp_path / "alerts.json"
    entries = [f"model-{n}" for n in range(4)]
    down = FakeBackend(refuse_all=True)
    problems = _deliver(tmp_path, _events(state, "2026-11-20", *map(_failing, entries)), down, [])
    assert len(down.tried) == STOP_AFTER_FAILURES == len(problems)
    assert [attempts for _, _, attempts in _pending(tmp_path)] == [1, 1, 0, 0]


def test_an_event_refused_run_after_run_is_given_up_and_said_so(tmp_path: Path) -> None:
    state = tmp_path / "alerts.json"
    down = FakeBackend(refuse_all=True)
    _deliver(tmp_path, _events(state, "2026-11-20", _failing()), down, [])
    for _ in range(GIVE_UP_AFTER_RUNS - 2):
        _deliver(tmp_path, [], down, [])
    assert _pending(tmp_path) == [(KEY, "2026-11-20", GIVE_UP_AFTER_RUNS - 1)]
    (problem,) = _deliver(tmp_path, [], down, [])
    assert f"given up after {GIVE_UP_AFTER_RUNS} runs" in problem
    assert _pending(tmp_path) == []


def test_the_local_target_writes_markdown_and_queues_nothing(tmp_path: Path) -> None:
    state, said = tmp_path / "alerts.json", []
    never = FakeBackend(refuse_all=True)
    assert _deliver(tmp_path, _events(state, "2026-11-20", _failing()), never, said, target="local") == []
    assert never.tried == [] and _pending(tmp_path) == []
    assert said == ["alert opened: smollm2-135m-instruct: performance regressed in tg32 (c1) tg_tps"]
    assert len(list((tmp_path / "runs" / "2026-11-20" / "alerts").glob("*.opened.md"))) == 1


def test_a_missing_repository_or_token_is_a_problem_and_the_alert_waits(tmp_path: Path) -> None:
    state, said = tmp_path / "alerts.json", []
    events = _events(state, "2026-11-20", _failing())
    settings = Settings(alert_target="github", github_token_env="UNIT_TOKEN")
    common = {"state_path": state, "run": RunDir(tmp_path / "run"), "say": said.append}
    (problem,) = deliver_alerts(events, settings=settings, environ={"UNIT_TOKEN": TOKEN}, **common)
    assert problem.endswith(f"alert.repo is empty: set it to owner/name; 1 kept pending ({KEY})")
    with_repo = Settings(alert_target="github", alert_repo="o/r", github_token_env="UNIT_TOKEN")
    (problem,) = deliver_alerts([], settings=with_repo, environ={}, **common)
    assert "$UNIT_TOKEN is not set" in problem and "1 kept pending" in problem
    (problem,) = deliver_alerts(events, settings=Settings(alert_target="webhook"), environ={}, **common)
    assert "alert.webhook_url is empty" in problem
    assert "alerts: 1 still pending for github, which is not alert.target now; kept" in said


def test_a_secret_quoted_by_a_crash_is_masked_everywhere_it_could_be_read(tmp_path: Path) -> None:
    state, said = tmp_path / "alerts.json", []
    backend = FakeBackend(refuse_all=True)
    crash = f"requests.exceptions.HTTPError: 401 for token {TOKEN}"
    _deliver(tmp_path, _events(state, "2026-11-20", crash=crash), backend, said)
    written = [p.read_text() for p in (tmp_path / "runs").rglob("*.md")]
    assert written and all(TOKEN not in text and "token ***" in text for text in written)
    assert TOKEN not in state.read_text() and "token ***" in state.read_text()  # the pending copy is masked too
    assert said  # not empty: an assert over nothing passes
    assert all(TOKEN not in line for line in said)
