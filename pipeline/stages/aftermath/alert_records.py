"""One alert's record and its Markdown: what it tracks (one check, or every cell of one regression), how each night
changes it, and the text a person reads when it opens, is updated or closes."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from pipeline.outcome import Failure, Outcome, perf_alert_key

PIPELINE_KEY = "pipeline"
BLIND_KEY = "pipeline:blind"  # the gate measured nothing it can judge: the pipeline's own alert, not a regression
Action = Literal["opened", "updated", "closed"]
RECOVERED = frozenset({"PASS", "XFAIL"})  # a cell measured with one of these statuses has recovered
# the key of an alert of the earlier form, one per failing perf cell: `<entry>:perf:<cell>`
_CELL_ALERT = re.compile(r"^(?P<entry>[^:]+):perf:(?P<cell>.+)$", re.DOTALL)


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
        return "pipeline-failure" if self.key in (PIPELINE_KEY, BLIND_KEY) else "regression"


def new_alert(outcome: Outcome, failures: Sequence[Failure], *, night: str, last_good: str | None) -> dict[str, Any]:
    """The record of an alert opened tonight; one with subjects tracks each of them (the cells of a regression)."""
    record: dict[str, Any] = {
        "open": True,
        "title": _title(outcome.entry, failures),
        "opened": night,
        "nights": [night],
        "last_good": last_good,
    }
    subjects = [f.subject for f in failures if f.subject]
    if subjects:
        record["subjects"] = {s: {"since": night, "recovered": None} for s in subjects}
    return record


def _title(entry: str, failures: Sequence[Failure]) -> str:
    if any(f.subject for f in failures):
        return f"{entry}: performance regressed in {', '.join(f.what for f in failures)}"
    return f"{entry}: {failures[0].what} regressed"


def open_body(
    outcome: Outcome, failures: Sequence[Failure], *, night: str, run_id: str, alert: Mapping[str, Any], suspects: str
) -> str:
    """What an opened alert says: what failed, by how much, since when, and the suspect change."""
    if not any(f.subject for f in failures):
        return _single_open_body(failures[0], outcome, night=night, run_id=run_id, alert=alert, suspects=suspects)
    lines = [
        f"**Performance of {outcome.entry}** regressed on {night} (run `{run_id}`), stage `{outcome.stage}`: "
        f"{len(failures)} cell(s).",
        "",
        *_cell_table(failures),
        "",
        f"- last good night: {alert.get('last_good') or 'none recorded'}",
    ]
    builds = sorted({str(f.evidence["last confirmed build"]) for f in failures if "last confirmed build" in f.evidence})
    if builds:
        lines.append(f"- paired with the last confirmed build: {', '.join(builds)}")
    lines.append(f"- suspect change: {suspects}")
    return "\n".join(lines) + "\n"


def _single_open_body(
    failure: Failure, outcome: Outcome, *, night: str, run_id: str, alert: Mapping[str, Any], suspects: str
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


def _cell_table(failures: Sequence[Failure]) -> list[str]:
    """One row per failing cell: the value, its reference, the change, the paired B/A and the reason."""
    rows = [
        "| cell | measured | reference | change | B/A | pairs | why |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for failure in failures:
        evidence = failure.evidence
        value, ref = evidence.get("value"), evidence.get("ref")
        numeric = isinstance(value, int | float) and isinstance(ref, int | float) and ref
        change = f"{value / ref - 1:+.1%}" if numeric else "-"  # type: ignore[operator]
        ratio = evidence.get("B/A")
        cells = [
            failure.what,
            _number(value),
            _number(ref),
            change,
            f"{ratio:.4f}" if isinstance(ratio, int | float) else "-",
            str(evidence.get("pairs", "-")),
            failure.reason,
        ]
        rows.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
    return rows


def _number(value: object) -> str:
    return f"{value:g}" if isinstance(value, int | float) else "-"


def update_body(
    alert: dict[str, Any], outcome: Outcome, failures: Sequence[Failure], *, night: str, run_id: str
) -> str:
    """A later failing night: the cells still failing, those that joined tonight, those that recovered."""
    head = f"Still failing on {night} (run `{run_id}`), night {len(alert['nights'])} since {alert['opened']}"
    subjects: dict[str, dict[str, Any]] | None = alert.get("subjects")
    if subjects is None:
        return f"{head}: {failures[0].reason}\n"
    failing = [f.subject for f in failures if f.subject]
    joined = [s for s in failing if s not in subjects]
    again = [s for s in failing if s in subjects and subjects[s]["recovered"]]
    for subject in joined:
        subjects[subject] = {"since": night, "recovered": None}
    for subject in again:
        subjects[subject]["recovered"] = None
    recovered = _mark_recovered(subjects, outcome, night, exclude=failing)
    lines = [f"{head}.", "", *_cell_table(failures), ""]
    lines += [f"- {label}: {', '.join(names)}" for label, names in _news(joined, again, recovered) if names]
    return "\n".join(lines).rstrip("\n") + "\n"


def _news(joined: list[str], again: list[str], recovered: list[str]) -> list[tuple[str, list[str]]]:
    return [("joined tonight", joined), ("failing again", again), ("recovered", recovered)]


def _mark_recovered(
    subjects: dict[str, dict[str, Any]], outcome: Outcome, night: str, exclude: Sequence[str]
) -> list[str]:
    """Mark the tracked cells that tonight measured within their references; returns those newly recovered."""
    cells: Mapping[str, Any] = outcome.numbers.get("cells", {})
    newly = []
    for subject, record in subjects.items():
        measured = cells.get(subject)
        status = measured.get("status") if isinstance(measured, Mapping) else None
        if subject not in exclude and record["recovered"] is None and status in RECOVERED:
            record["recovered"] = night
            newly.append(subject)
    return newly


def all_recovered(alert: dict[str, Any], outcome: Outcome, night: str) -> bool:
    """Whether every cell an alert tracks has now been measured within its reference (never for a plain alert)."""
    subjects: dict[str, dict[str, Any]] | None = alert.get("subjects")
    if not subjects:
        return False
    _mark_recovered(subjects, outcome, night, exclude=())
    return all(record["recovered"] for record in subjects.values())


def close_body(alert: Mapping[str, Any], night: str, run_id: str) -> str:
    """The closing comment: the night it passed, and when each tracked cell recovered."""
    subjects: Mapping[str, Mapping[str, Any]] = alert.get("subjects") or {}
    when = ", ".join(f"{s} on {r['recovered'] or night}" for s, r in sorted(subjects.items()))
    recovered = f" Every cell recovered: {when}." if when else ""
    return f"Passed again on {night} (run `{run_id}`): closing.{recovered}\n"


def carry_over_cell_alerts(alerts: dict[str, Any], night: str, run_id: str) -> list[AlertEvent]:
    """Open alerts of the earlier one-per-cell form become one alert per entry: the oldest (with its issue) tracks
    every cell, the others close with a pointer to it. Closed ones stay as they are."""
    by_entry: dict[str, list[tuple[str, str]]] = {}
    for key, known in alerts.items():
        found = _CELL_ALERT.match(key)
        if found and known["open"]:
            by_entry.setdefault(found["entry"], []).append((key, found["cell"]))
    events: list[AlertEvent] = []
    for entry, old in sorted(by_entry.items()):
        old.sort(key=lambda item: (alerts[item[0]]["opened"], item[0]))
        target = perf_alert_key(entry)
        tracked = {cell: {"since": alerts[key]["opened"], "recovered": None} for key, cell in old}
        if target not in alerts or not alerts[target]["open"]:
            first_key, _ = old.pop(0)
            alerts[target] = alerts.pop(first_key) | {"subjects": tracked}
            cells = ", ".join(sorted(alerts[target]["subjects"]))
            body = (
                f"From {night} one alert tracks every cell of one regression of {entry}: this one now tracks {cells}.\n"
            )
            events.append(AlertEvent(target, "updated", alerts[target]["title"], body, night, run_id))
        kept = alerts[target]
        where = f"#{kept['issue']} ({kept['title']})" if kept.get("issue") else f"the alert '{kept['title']}'"
        for key, cell in old:
            alerts[key]["open"] = False
            kept.setdefault("subjects", {}).setdefault(cell, tracked[cell])
            body = f"One alert now tracks every cell of a regression: {cell} continues in {where}.\n"
            events.append(AlertEvent(key, "closed", alerts[key]["title"], body, night, run_id))
    return events


def one_event_per_alert(events: Sequence[AlertEvent]) -> list[AlertEvent]:
    """Events of one key on one night as one (the last action, the bodies in order): a comment a night an alert."""
    merged: dict[str, AlertEvent] = {}
    for event in events:
        earlier = merged.get(event.key)
        merged[event.key] = replace(event, body=earlier.body + "\n" + event.body) if earlier else event
    return list(merged.values())
