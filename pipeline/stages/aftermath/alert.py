"""Alerts: one per regression key, opened once, updated on later nights, closed when the entry passes again.

The state of every alert lives in `paths.state/alerts.json`; the embedded backend writes each
opened, updated or closed alert as Markdown into the run directory and says it on the console.
GitHub issues and the webhook are delivered by `pipeline.stages.aftermath.alert_backends.deliver_alerts`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pipeline.infra.files import write_atomically
from pipeline.outcome import Failure, Outcome
from pipeline.progress import Say, quiet
from pipeline.stages.aftermath.alert_records import (
    BLIND_KEY,
    PIPELINE_KEY,
    AlertEvent,
    carry_over_cell_alerts,
    close_body,
    new_alert,
    one_event_per_alert,
    open_body,
    record_recoveries,
    track_cells,
    update_body,
)
from pipeline.stages.aftermath.blind import blind_alert, blind_reasons
from pipeline.status import Status

ALERTS_VERSION = 1
__all__ = [
    "ALERTS_VERSION",
    "BLIND_KEY",
    "PIPELINE_KEY",
    "AlertEvent",
    "raise_alerts",
    "raise_pipeline_failure",
    "write_local",
]


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
    sources: Mapping[str, Any] | None = None,
) -> list[AlertEvent]:
    """Open, update or close one alert per key; INCONCLUSIVE entries neither open nor close anything.

    The failures of one key on one night are one alert (every failing perf cell of an entry: one regression, one
    alert). A cell that joins a later night is part of that night's update; the alert closes once the entry passes
    or every cell it tracks has been measured within its reference again. `report` links the night's report (the
    Actions run, or the report's path) in opened and updated alerts. `sources`: the night's mains and grafted PRs,
    kept in an opened alert for the release notes of the night that fixes it.
    """
    state = _state(state_path)
    alerts: dict[str, Any] = state["alerts"]
    last_good: dict[str, str] = state.setdefault("last_good", {})
    events = carry_over_cell_alerts(alerts, night, run_id)
    link = f"\nReport: {report}\n" if report else ""  # after an update; an opened alert lists it
    groups = _failing_groups(outcomes)
    for key, (outcome, failures) in sorted(groups.items()):
        known = alerts.get(key)
        if known and known["open"]:
            known["nights"].append(night)
            news = track_cells(known, outcome, failures, night)
            body = update_body(known, failures, news, night=night, run_id=run_id) + link
            events.append(AlertEvent(key, "updated", known["title"], body, night, run_id))
            continue
        alerts[key] = new_alert(
            outcome, failures, night=night, last_good=last_good.get(outcome.entry), suspects=suspects, sources=sources
        )
        body = open_body(outcome, failures, night=night, run_id=run_id, alert=alerts[key], suspects=suspects)
        body += f"- report: {report}\n" if report else ""
        events.append(AlertEvent(key, "opened", alerts[key]["title"], body, night, run_id))
    passing = {o.entry for o in outcomes if o.status in {Status.PASS, Status.XFAIL}}
    last_good |= dict.fromkeys(passing, night)
    measured = {o.entry: o for o in outcomes}
    for key, known in sorted(alerts.items()):
        if key.startswith(PIPELINE_KEY) or key in groups or not known["open"]:
            continue
        entry = key.split(":", 1)[0]
        if entry in passing or (entry in measured and record_recoveries(known, measured[entry], night)):
            known["open"] = False
            events.append(AlertEvent(key, "closed", known["title"], close_body(known, night, run_id), night, run_id))
    events.extend(_pipeline_alert(alerts, crash, night, run_id))
    if crash is None:  # a crashed night says nothing about what the gate can see
        blind = blind_reasons(outcomes, state.setdefault("inconclusive", {}), night)
        events.extend(blind_alert(alerts, blind, night, run_id))
    state_path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(state_path, json.dumps(state, indent=2, sort_keys=True) + "\n")
    return one_event_per_alert(events)


def _failing_groups(outcomes: Sequence[Outcome]) -> dict[str, tuple[Outcome, list[Failure]]]:
    """Tonight's failures by alert key, each with the outcome it came from."""
    groups: dict[str, tuple[Outcome, list[Failure]]] = {}
    for outcome in outcomes:
        if outcome.status == Status.FAIL:
            for failure in outcome.failing():
                groups.setdefault(failure.key, (outcome, []))[1].append(failure)
    return groups


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


def write_local(events: Sequence[AlertEvent], folder: Path, *, say: Say = quiet) -> None:
    """The embedded backend: Markdown files in the run directory, one line each on the console."""
    folder.mkdir(parents=True, exist_ok=True)
    for event in events:
        name = "".join(c if c.isalnum() or c in "-." else "_" for c in event.key)
        (folder / f"{name}.{event.action}.md").write_text(f"# {event.title}\n\n{event.body}")
        say(f"alert {event.action}: {event.title}")
