"""Alerts as GitHub issues against the stand-in: one issue per key across nights, found again without alerts.json,
retried through GitHub's failures and across runs, never duplicated, and never showing the token."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pipeline.outcome import Failure, Outcome
from pipeline.places import RunDir
from pipeline.settings import Settings
from pipeline.stages.aftermath.alert import raise_alerts
from pipeline.stages.aftermath.alert_backends import deliver_alerts
from pipeline.status import Status
from tests.fakes.github import TOKEN, StandIn

pytestmark = pytest.mark.integration

ENTRY = "smollm2-135m-instruct"
KEY = f"{ENTRY}:perf"
TOKEN_ENV = "SPARK_NIGHTLY_TEST_ALERT_TOKEN"


def _failing() -> Outcome:
    failure = Failure(
        KEY,
        "tg32 (c1) tg_tps",
        "B/A 0.7262 over 8 pairs is below 0.98 and significant",
        {"value": 13.1, "ref": 18.7},
        subject="tg32 (c1)",
    )
    return Outcome(ENTRY, Status.FAIL, "perf", "tg32 (c1): tripped twice", True, 301.5, {}, (failure,))


def _passing() -> Outcome:
    return Outcome(ENTRY, Status.PASS, "perf", "4 cells within their references", True, 280.0)


@dataclass
class Nights:
    """Runs nights against the stand-in, keeping what was said, waited for and reported."""

    server: StandIn
    root: Path
    said: list[str] = field(default_factory=list)
    waits: list[float] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def state(self) -> Path:
        return self.root / "history" / "alerts.json"

    def run(self, night: str, *outcomes: Outcome, crash: str | None = None) -> list[str]:
        events = raise_alerts(
            list(outcomes), night=night, run_id=f"run-{night}", state_path=self.state, suspects="vllm a..b", crash=crash
        )
        settings = Settings(
            alert_target="github",
            alert_repo=self.server.repo,
            github_api_url=self.server.url,
            github_token_env=TOKEN_ENV,
        )
        problems = deliver_alerts(
            events,
            settings=settings,
            state_path=self.state,
            run=RunDir(self.root / "runs" / night),
            say=self.said.append,
            environ={TOKEN_ENV: TOKEN},
            sleep=self.waits.append,
        )
        self.problems += problems
        return problems

    def issues(self) -> list[dict[str, object]]:
        return list(self.server.state.issues.values())

    def comments(self, number: int) -> list[str]:
        return [str(c["body"]) for c in self.server.state.issues[number]["comments"]]


@pytest.fixture()
def nights(stand_in: StandIn, tmp_path: Path) -> Nights:
    return Nights(stand_in, tmp_path)


def test_failing_nights_make_one_issue_with_a_comment_each_and_recovery_closes_it(nights: Nights) -> None:
    for night in ("2026-11-20", "2026-11-21", "2026-11-22"):
        assert nights.run(night, _failing()) == []
    (issue,) = nights.issues()
    assert issue["title"] == f"{ENTRY}: performance regressed in tg32 (c1) tg_tps" and issue["state"] == "open"
    assert issue["labels"] == ["spark-nightly", "regression"]
    assert f"<!-- spark-nightly-alert: {KEY} -->" in str(issue["body"])
    assert [c.splitlines()[0][:27] for c in nights.comments(1)] == [
        "Still failing on 2026-11-21",
        "Still failing on 2026-11-22",
    ]
    assert json.loads(nights.state.read_text())["alerts"][KEY]["issue"] == 1
    assert sorted(nights.server.state.labels) == ["pipeline-failure", "regression", "spark-nightly"]
    assert nights.run("2026-11-23", _passing()) == []
    (issue,) = nights.issues()
    assert (issue["state"], issue["state_reason"]) == ("closed", "completed")
    assert nights.comments(1)[-1].startswith("Passed again on 2026-11-23 (run `run-2026-11-23`): closing.")
    nights.run("2026-11-24", _failing())  # a new regression of the same key: a new issue, the old one stays closed
    assert [(i["number"], i["state"]) for i in nights.issues()] == [(1, "closed"), (2, "open")]


def test_a_runner_that_lost_alerts_json_finds_the_open_issue_instead_of_opening_another(nights: Nights) -> None:
    nights.run("2026-11-20", _failing())
    nights.state.unlink()
    nights.run("2026-11-21", _failing())  # to this runner the alert is new
    assert len(nights.issues()) == 1
    (comment,) = nights.comments(1)
    assert "regressed on 2026-11-21" in comment  # that night's evidence is kept, as a comment
    assert json.loads(nights.state.read_text())["alerts"][KEY]["issue"] == 1
    nights.state.unlink()
    nights.run("2026-11-22", _failing())  # found again, and ...
    nights.run("2026-11-23", _passing())  # ... closed by number
    assert [(i["number"], i["state"]) for i in nights.issues()] == [(1, "closed")]


def test_a_pipeline_crash_has_its_own_issue_and_closes_when_the_pipeline_runs_through(nights: Nights) -> None:
    nights.run("2026-11-20", _failing())
    nights.run("2026-11-21", _failing(), crash="Traceback (most recent call last):\nKeyError: 'cells'")
    regression, crash = nights.issues()
    assert crash["title"] == "spark-nightly pipeline failure"
    assert crash["labels"] == ["spark-nightly", "pipeline-failure"] and "KeyError: 'cells'" in str(crash["body"])
    assert regression["number"] != crash["number"] and len(nights.comments(1)) == 1
    nights.run("2026-11-22", _failing())
    assert nights.server.state.issues[2]["state"] == "closed" and nights.server.state.issues[1]["state"] == "open"


@pytest.mark.parametrize(
    ("fault", "count", "expected_waits"),
    [
        ("secondary_rate_limit", 2, [1.0, 1.0]),  # retry-after: 1, honoured
        ("server_errors", 3, [1.0, 2.0, 4.0]),  # 502: exponential back-off
        ("lose_issue_answer", 1, [1.0]),  # the issue is made, its answer lost: found again, not made twice
    ],
)
def test_a_transient_failure_is_retried_within_the_run(
    nights: Nights, fault: str, count: int, expected_waits: list[float]
) -> None:
    setattr(nights.server.state.faults, fault, count)
    assert nights.run("2026-11-20", _failing()) == []
    assert nights.waits == expected_waits, nights.said
    assert len(nights.issues()) == 1


def test_a_lost_comment_answer_is_not_posted_twice(nights: Nights) -> None:
    nights.run("2026-11-20", _failing())
    nights.server.state.faults.lose_issue_answer = 1
    nights.run("2026-11-21", _failing())
    assert len(nights.comments(1)) == 1 and nights.waits == [1.0]


def test_an_outage_keeps_the_alert_pending_and_the_next_night_delivers_it_once(nights: Nights) -> None:
    nights.server.state.faults.server_errors = 1000
    (problem,) = nights.run("2026-11-20", _failing())
    assert "HTTP 502 Server Error" in problem and problem.endswith(f"1 kept pending ({KEY})")
    assert nights.issues() == [] and list((nights.root / "runs" / "2026-11-20" / "alerts").glob("*.opened.md"))
    nights.server.state.faults.server_errors = 0
    assert nights.run("2026-11-21", _failing()) == []
    (issue,) = nights.issues()
    assert "regressed on 2026-11-20" in str(issue["body"]) and len(nights.comments(1)) == 1
    assert json.loads(nights.state.read_text())["pending"]["github"] == []


def test_an_issue_made_before_the_outage_hid_its_answer_is_reused_on_the_next_night(nights: Nights) -> None:
    faults = nights.server.state.faults

    def outage_after_the_first_wait(seconds: float) -> None:
        faults.server_errors = 1000  # the issue exists on GitHub; every later call of this run fails

    faults.lose_issue_answer = 1
    problems = deliver_after(nights, outage_after_the_first_wait)
    assert len(problems) == 1 and len(nights.issues()) == 1
    faults.server_errors = 0
    nights.run("2026-11-21", _failing())
    assert len(nights.issues()) == 1
    assert [c.splitlines()[0][:27] for c in nights.comments(1)] == ["Still failing on 2026-11-21"]


def deliver_after(nights: Nights, sleep: object) -> list[str]:
    """Night 2026-11-20 with the run's waits going to `sleep`."""
    events = raise_alerts(
        [_failing()], night="2026-11-20", run_id="run-2026-11-20", state_path=nights.state, suspects="vllm a..b"
    )
    settings = Settings(
        alert_target="github",
        alert_repo=nights.server.repo,
        github_api_url=nights.server.url,
        github_token_env=TOKEN_ENV,
    )
    assert callable(sleep)
    return deliver_alerts(
        events,
        settings=settings,
        state_path=nights.state,
        run=RunDir(nights.root / "runs" / "2026-11-20"),
        say=nights.said.append,
        environ={TOKEN_ENV: TOKEN},
        sleep=sleep,
    )


def test_a_deleted_issue_gets_a_successor_rather_than_losing_the_update(nights: Nights) -> None:
    nights.run("2026-11-20", _failing())
    del nights.server.state.issues[1]
    nights.run("2026-11-21", _failing())
    (issue,) = nights.issues()
    assert issue["number"] == 2 and str(issue["body"]).startswith("The issue first opened for this alert")
    assert json.loads(nights.state.read_text())["alerts"][KEY]["issue"] == 2


def test_the_token_never_shows_in_what_alerting_says_writes_or_sends(
    nights: Nights, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    nights.server.state.faults.secondary_rate_limit = 1
    nights.run("2026-11-20", _failing(), crash=f"github3.exceptions.AuthenticationFailed: 401 with token {TOKEN}")
    nights.server.state.faults.server_errors = 1000
    nights.run("2026-11-21", _failing())
    assert nights.said and nights.problems
    seen = [*nights.said, *nights.problems, caplog.text, capsys.readouterr().out, nights.state.read_text()]
    seen += [p.read_text() for p in (nights.root / "runs").rglob("*.md")]
    seen += [str(i["body"]) for i in nights.issues()]
    assert any("with token ***" in str(i["body"]) for i in nights.issues())  # the crash reached GitHub, masked
    assert seen  # not empty: an assert over nothing passes
    assert all(TOKEN not in text for text in seen)
