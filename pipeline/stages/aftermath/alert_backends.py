"""Alert delivery: Markdown in the run directory and the console always, then GitHub issues or a webhook as configured.

Remote delivery goes through an outbox kept in alerts.json (`pending`, per target): tonight's events are queued
before the first call, and each leaves the queue only once delivered. An event that fails stays queued, with the
later events of its key behind it, and is tried again on the next run (a later night or --resume). GitHub delivery
is idempotent: an issue carries a hidden marker naming its key, and each comment one naming its key, action and
night, so a retried event whose first answer was lost, or a runner that lost alerts.json, finds what is already
there instead of opening or commenting twice. Secrets (the token, the webhook URL) are masked in every body.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Protocol

from pipeline.errors import SparkNightlyError
from pipeline.infra.files import write_atomically
from pipeline.infra.github import GitHubIssues
from pipeline.infra.webhook import Webhook
from pipeline.places import RunDir
from pipeline.progress import Say
from pipeline.settings import Settings
from pipeline.stages.aftermath.alert import ALERTS_VERSION, AlertEvent, write_local

LABEL = "spark-nightly"
LABELS = {  # name -> (colour, description), created where the repository lacks them
    LABEL: ("5319e7", "Raised by the spark-nightly regression gate"),
    "regression": ("d93f0b", "A nightly wheel regressed against its reference"),
    "pipeline-failure": ("b60205", "The spark-nightly pipeline itself failed"),
}
GIVE_UP_AFTER_RUNS = 7  # an event refused this many runs in a row is dropped, with a problem saying so
STOP_AFTER_FAILURES = 2  # failures in one run after which the rest waits: the service is most likely down
_MASK = "***"
_SLACK_TEXT_LIMIT = 3900  # Slack advises at most 4,000 characters of `text`
_DISCORD_CONTENT_LIMIT = 2000  # Discord refuses longer `content`


class Backend(Protocol):
    """Where alerts go besides the run directory."""

    name: str

    def deliver(self, event: AlertEvent, issue: int | None) -> int | None:
        """Deliver one event; `issue` is where its alert lives, if known. Returns where it lives now."""
        ...


def deliver_alerts(
    events: Sequence[AlertEvent],
    *,
    settings: Settings,
    state_path: Path,
    run: RunDir,
    say: Say,
    environ: Mapping[str, str] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    backend: Backend | None = None,
) -> list[str]:
    """Write tonight's alerts to the run's alerts folder and the console, then deliver them (and any still pending).

    Returns one line per problem, for the report and the console; a failed delivery never raises, its events stay
    pending in `state_path` for the next run. `environ`, `sleep` and `backend` are seams for tests.
    """
    environ = os.environ if environ is None else environ
    secrets = [s for s in (environ.get(settings.github_token_env, ""), settings.alert_webhook_url) if s]
    events = [_masked(event, secrets) for event in events]
    write_local(events, run.alerts, say=say)
    state = _read_state(state_path)
    outbox: dict[str, list[dict[str, Any]]] = state.setdefault("pending", {})
    for other, waiting in sorted(outbox.items()):
        if other != settings.alert_target and waiting:
            say(f"alerts: {len(waiting)} still pending for {other}, which is not alert.target now; kept")
    if settings.alert_target == "local":
        return []
    queue = outbox.setdefault(settings.alert_target, [])
    queue.extend({"event": asdict(event), "attempts": 0} for event in events)
    _write_state(state_path, state)  # queued before the first call: an interruption leaves the rest pending
    if not queue:
        return []
    try:
        chosen = backend or _open_backend(settings, environ, say, sleep)
    except SparkNightlyError as exc:
        keys = ", ".join(sorted({record["event"]["key"] for record in queue}))
        problem = f"alerts not delivered to {settings.alert_target}: {exc}; {len(queue)} kept pending ({keys})"
        say(problem)
        return [problem]
    return _drain(queue, chosen, state, state_path, say)


def _drain(queue: list[dict[str, Any]], backend: Backend, state: dict[str, Any], path: Path, say: Say) -> list[str]:
    """Deliver the queue in order; a failed event holds back the later events of its key."""
    problems: list[str] = []
    held: set[str] = set()
    failures = 0
    for record in list(queue):
        event = AlertEvent(**record["event"])
        if event.key in held or failures >= STOP_AFTER_FAILURES:
            held.add(event.key)
            continue
        alert = state["alerts"].get(event.key)
        try:
            where = backend.deliver(event, alert.get("issue") if alert else None)
        except SparkNightlyError as exc:
            failures += 1
            held.add(event.key)
            record["attempts"] += 1
            problem = f"alert {event.key} ({event.action}, {event.night}) not delivered to {backend.name}: {exc}"
            if record["attempts"] >= GIVE_UP_AFTER_RUNS:
                queue.remove(record)
                problem += f"; given up after {record['attempts']} runs, see its Markdown in that night's run"
            else:
                problem += "; kept pending for the next run"
            problems.append(problem)
            say(problem)
        else:
            queue.remove(record)
            if where is not None and alert is not None:
                alert["issue"] = where
        _write_state(path, state)
    if queue:
        say(f"alerts: {len(queue)} kept pending for {backend.name}; they are delivered on the next run")
    return problems


def _open_backend(settings: Settings, environ: Mapping[str, str], say: Say, sleep: Callable[[float], None]) -> Backend:
    if settings.alert_target == "github":
        if not settings.alert_repo:
            raise SparkNightlyError("alert.target is github but alert.repo is empty: set it to owner/name")
        token = environ.get(settings.github_token_env, "")
        if not token:
            raise SparkNightlyError(f"alert.target is github but ${settings.github_token_env} is not set")
        issues = GitHubIssues(settings.alert_repo, token, api_url=settings.github_api_url, say=say, sleep=sleep)
        return GitHubIssueBackend(issues, say)
    if not settings.alert_webhook_url:
        raise SparkNightlyError("alert.target is webhook but alert.webhook_url is empty")
    return WebhookBackend(Webhook(settings.alert_webhook_url, say=say, sleep=sleep))


class GitHubIssueBackend:
    """One issue per alert: opened with labels, a comment per later night, a closing comment, then closed."""

    name = "github"

    def __init__(self, issues: GitHubIssues, say: Say) -> None:
        self._issues = issues
        self._say = say

    def deliver(self, event: AlertEvent, issue: int | None) -> int | None:
        marker = alert_marker(event.key)
        if event.action == "opened":
            # a runner that lost alerts.json opens again what GitHub still holds open: that night becomes a comment
            found = self._issues.find_open(LABEL, marker)
            if found is not None and self._issues.comment(found, comment_body(event), event_marker(event)):
                self._say(f"alert opened again on GitHub: #{found} already tracks {event.title}; commented")
                return found
            return self._open(event, issue_body(event))
        number = issue if issue is not None else self._issues.find_open(LABEL, marker)
        if number is None or not self._issues.comment(number, comment_body(event), event_marker(event)):
            if event.action == "closed":
                self._say(f"alert closed: no GitHub issue for {event.key} is open; nothing to close")
                return None
            # deleted or never delivered: the alert must not be lost, so its night opens a new issue
            return self._open(event, issue_body(event, lost=True))
        if event.action == "closed":
            self._issues.close(number)
        self._say(f"alert {event.action} on GitHub: #{number} {event.title}")
        return number

    def _open(self, event: AlertEvent, body: str) -> int:
        self._issues.ensure_labels(LABELS)
        number = self._issues.open_issue(event.title, body, [LABEL, event.kind], alert_marker(event.key))
        self._say(f"alert opened on GitHub: #{number} {event.title}")
        return number


class WebhookBackend:
    """One chat message per event."""

    name = "webhook"

    def __init__(self, hook: Webhook) -> None:
        self._hook = hook

    def deliver(self, event: AlertEvent, issue: int | None) -> int | None:
        self._hook.post(webhook_payload(event), what=f"the alert {event.key} ({event.action}, {event.night})")
        return None


def alert_marker(key: str) -> str:
    """The hidden line that finds an alert's issue again; `-->` in a key would end the comment early."""
    return f"<!-- spark-nightly-alert: {_safe(key)} -->"


def event_marker(event: AlertEvent) -> str:
    """The hidden line that keeps one night's comment from being posted twice."""
    return f"<!-- spark-nightly-alert-event: {_safe(event.key)} | {event.action} | {event.night} -->"


def _safe(key: str) -> str:
    return key.replace("-->", "--&gt;").replace("\n", " ")


def issue_body(event: AlertEvent, *, lost: bool = False) -> str:
    """The body of a new issue: the alert, what happens next, and the marker."""
    until = "the pipeline runs through again" if event.kind == "pipeline-failure" else "the entry passes again"
    lines = []
    if lost:
        lines += ["The issue first opened for this alert could not be found; this one continues it.", ""]
    lines += [
        event.body.rstrip("\n"),
        "",
        "---",
        f"_Raised by spark-nightly. Each later failing night adds a comment; closed with a comment once {until}._",
        "",
        alert_marker(event.key),
        event_marker(event),
    ]
    return "\n".join(lines) + "\n"


def comment_body(event: AlertEvent) -> str:
    """A later night's comment, or the closing one."""
    return f"{event.body.rstrip(chr(10))}\n\n{event_marker(event)}\n"


def webhook_payload(event: AlertEvent) -> dict[str, str]:
    """One message both Slack (`text`) and Discord (`content`) accept; each service ignores the other's field."""
    headline = {"opened": "new alert", "updated": "still failing", "closed": "resolved"}[event.action]
    text = f"spark-nightly {headline}: {event.title}\n\n{event.body.rstrip(chr(10))}"
    return {"text": _clip(text, _SLACK_TEXT_LIMIT), "content": _clip(text, _DISCORD_CONTENT_LIMIT)}


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _masked(event: AlertEvent, secrets: Sequence[str]) -> AlertEvent:
    """The event with every secret masked: a crash's traceback may quote one."""
    title, body = event.title, event.body
    for secret in secrets:
        title, body = title.replace(secret, _MASK), body.replace(secret, _MASK)
    return replace(event, title=title, body=body)


def _read_state(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {"version": ALERTS_VERSION, "alerts": {}}
    data: dict[str, Any] = json.loads(path.read_text())
    data.setdefault("alerts", {})
    return data


def _write_state(path: Path, state: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(state, indent=2, sort_keys=True) + "\n")
