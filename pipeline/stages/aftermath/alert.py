"""Alerts: one per regression key, opened once, updated on later nights, closed when the entry passes again.

The state of every alert lives in `paths.state/alerts.json`; the embedded backend writes each
opened, updated or closed alert as Markdown into the run directory and says it on the console.
GitHub issues and the webhook are delivered by `pipeline.stages.aftermath.alert_backends.deliver_alerts`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pipeline.infra.runtime import write_atomically
from pipeline.outcome import Failure, Outcome
from pipeline.progress import Say, quiet
from pipeline.status import Status

ALERTS_VERSION = 1
PIPELINE_KEY = "pipeline"
Action = Literal["opened", "updated", "closed"]


@dataclass(frozen=True)
class AlertEvent:
    """What tonight did to one alert, with the Markdown body a person reads."""

    key: str
    action: Action
    title: str
    body: str
    night: str = ""
    run_id: str = ""

    @property
    def kind(self) -> str:
        """What failed: a regression of the wheels, or the pipeline itself."""
        return "pipeline-failure" if self.key == PIPELINE_KEY else "regression"


def _state(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {"version": ALERTS_VERSION, "alerts": {}}
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def raise_alerts(
    outcomes: Sequence[Outcome],
    *,
    night: str,
    run_id: str,
    state_path: Path,
    suspects: str,
    crash: str | None = None,
    report: str | None = None,
) -> list[AlertEvent]:
    """Open, update or close one alert per key; INCONCLUSIVE entries neither open nor close anything.

    `report` links the night's report (the Actions run, or the report's path) in opened and updated alerts.
    """
    state = _state(state_path)
    alerts: dict[str, Any] = state["alerts"]
    last_good: dict[str, str] = state.setdefault("last_good", {})
    events: list[AlertEvent] = []
    failing = {f.key: (o, f) for o in outcomes if o.status == Status.FAIL for f in o.failing()}
    for key, (outcome, failure) in sorted(failing.items()):
        known = alerts.get(key)
        if known and known["open"]:
            known["nights"].append(night)
            body = _update_body(failure, night, run_id, known) + (f"\nReport: {report}\n" if report else "")
            events.append(AlertEvent(key, "updated", known["title"], body, night, run_id))
        else:
            title = f"{outcome.entry}: {failure.what} regressed"
            alerts[key] = {
                "open": True,
                "title": title,
                "opened": night,
                "nights": [night],
                "last_good": last_good.get(outcome.entry),
            }
            events.append(
                AlertEvent(
                    key,
                    "opened",
                    title,
                    _open_body(failure, outcome, night=night, run_id=run_id, alert=alerts[key], suspects=suspects)
                    + (f"- report: {report}\n" if report else ""),
                    night,
                    run_id,
                )
            )
    passing = {o.entry for o in outcomes if o.status in {Status.PASS, Status.XFAIL}}
    last_good |= dict.fromkeys(passing, night)
    for key, known in sorted(alerts.items()):
        recovered = key != PIPELINE_KEY and key.split(":", 1)[0] in passing and key not in failing
        if recovered and known["open"]:
            known["open"] = False
            closing = f"Passed again on {night} (run `{run_id}`): closing.\n"
            events.append(AlertEvent(key, "closed", known["title"], closing, night, run_id))
    events.extend(_pipeline_alert(alerts, crash, night, run_id))
    state_path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(state_path, json.dumps(state, indent=2, sort_keys=True) + "\n")
    return events


def raise_pipeline_failure(state_path: Path, *, what: str, night: str, run_id: str) -> list[AlertEvent]:
    """A job of the night broke before the night could decide (or while it did): the pipeline-failure alert is
    opened, or updated while open; the next night that runs through closes it. Regression alerts stay as they are."""
    state = _state(state_path)
    events = _pipeline_alert(state["alerts"], what, night, run_id)
    state_path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(state_path, json.dumps(state, indent=2, sort_keys=True) + "\n")
    return events


def _pipeline_alert(alerts: dict[str, Any], crash: str | None, night: str, run_id: str) -> list[AlertEvent]:
    known = alerts.get(PIPELINE_KEY)
    if crash is not None:
        body = f"The pipeline itself failed on {night} (run `{run_id}`); no wheel is blamed.\n\n```\n{crash}\n```\n"
        if known and known["open"]:
            known["nights"].append(night)
            return [AlertEvent(PIPELINE_KEY, "updated", known["title"], body, night, run_id)]
        alerts[PIPELINE_KEY] = {
            "open": True,
            "title": "spark-nightly pipeline failure",
            "opened": night,
            "nights": [night],
        }
        return [AlertEvent(PIPELINE_KEY, "opened", "spark-nightly pipeline failure", body, night, run_id)]
    if known and known["open"]:
        known["open"] = False
        closing = f"The pipeline ran through on {night}: closing.\n"
        return [AlertEvent(PIPELINE_KEY, "closed", known["title"], closing, night, run_id)]
    return []


def _open_body(
    failure: Failure, outcome: Outcome, *, night: str, run_id: str, alert: dict[str, Any], suspects: str
) -> str:
    lines = [
        f"**{failure.what}** failed on {night} (run `{run_id}`), stage `{outcome.stage}`.",
        "",
        f"- reason: {failure.reason}",
        f"- last good night: {alert.get('last_good') or 'none recorded'}",
        f"- suspect change: {suspects}",
    ]
    evidence = failure.evidence
    value, ref = evidence.get("value"), evidence.get("ref")
    if isinstance(value, int | float) and isinstance(ref, int | float) and ref:
        lines.append(f"- by how much: {value:g} against the reference {ref:g} ({(value / ref - 1):+.1%})")
    lines += [f"- {name}: `{item}`" for name, item in sorted(evidence.items())]
    return "\n".join(lines) + "\n"


def _update_body(failure: Failure, night: str, run_id: str, alert: dict[str, Any]) -> str:
    return (
        f"Still failing on {night} (run `{run_id}`), night {len(alert['nights'])} since {alert['opened']}: "
        f"{failure.reason}\n"
    )


def write_local(events: Sequence[AlertEvent], folder: Path, *, say: Say = quiet) -> None:
    """The embedded backend: Markdown files in the run directory, one line each on the console."""
    folder.mkdir(parents=True, exist_ok=True)
    for event in events:
        name = "".join(c if c.isalnum() or c in "-." else "_" for c in event.key)
        (folder / f"{name}.{event.action}.md").write_text(f"# {event.title}\n\n{event.body}")
        say(f"alert {event.action}: {event.title}")
