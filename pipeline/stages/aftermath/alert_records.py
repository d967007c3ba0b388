"""One alert's record and its Markdown: what it tracks (one check, every cell of one perf regression, or every golden
check of one entry), how each night changes it, and the text a person reads when it opens, is updated or closes."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from pipeline.outcome import Failure, Outcome, cells_of, golden_alert_key, perf_alert_key
from pipeline.status import Status

PIPELINE_KEY = "pipeline"
BLIND_KEY = "pipeline:blind"  # the gate measured nothing it can judge: the pipeline's own alert, not a regression
Action = Literal["opened", "updated", "closed"]
RECOVERED = frozenset({Status.PASS, Status.XFAIL})  # a cell measured with one of these statuses has recovered
# the key of an alert of the earlier forms, one per failing perf cell (`<entry>:perf:<cell>`) or golden check
# (`<entry>:golden:<check>:<prompt>`)
_CELL_ALERT = re.compile(r"^(?P<entry>[^:]+):(?P<kind>perf|golden):(?P<cell>.+)$", re.DOTALL)
GOLDEN = "golden"  # an alert's kind: it tracks golden checks (its subjects), not perf cells


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


def new_alert(
    outcome: Outcome,
    failures: Sequence[Failure],
    *,
    night: str,
    last_good: str | None,
    suspects: str = "",
    sources: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The record of an alert opened tonight; one with subjects tracks each of them (the cells of a regression). It
    keeps what it was blamed on and the night's sources, so the night that fixes it can say what changed."""
    record: dict[str, Any] = {
        "open": True,
        "title": _title(outcome.entry, failures),
        "opened": night,
        "nights": [night],
        "last_good": last_good,
    }
    record |= {"suspects": suspects} if suspects else {}
    record |= {"sources": dict(sources)} if sources else {}
    subjects = [f.subject for f in failures if f.subject]
    if subjects:
        record["subjects"] = {s: {"since": night, "recovered": None} for s in subjects}
    if _is_golden(failures):
        record["kind"] = GOLDEN
    return record


def _is_golden(failures: Sequence[Failure]) -> bool:
    return bool(failures) and failures[0].key.endswith(":" + GOLDEN)


def _title(entry: str, failures: Sequence[Failure]) -> str:
    if _is_golden(failures):
        named = ", ".join(f.subject for f in failures[:3]) + (
            f" and {len(failures) - 3} more" if len(failures) > 3 else ""
        )
        return f"{entry}: {len(failures)} golden check(s) failed: {named}"
    if any(f.subject for f in failures):
        return f"{entry}: performance regressed in {', '.join(f.what for f in failures)}"
    return f"{entry}: {failures[0].what} regressed"


def open_body(
    outcome: Outcome, failures: Sequence[Failure], *, night: str, run_id: str, alert: Mapping[str, Any], suspects: str
) -> str:
    """What an opened alert says: what failed, by how much, since when, and the suspect change."""
    if _is_golden(failures):
        lines = [
            f"**Golden checks of {outcome.entry}** failed on {night} (run `{run_id}`): {len(failures)} check(s).",
            "",
            *_check_table(failures),
            "",
            f"- last good night: {alert.get('last_good') or 'none recorded'}",
            f"- suspect change: {suspects}",
        ]
        return "\n".join(lines) + "\n"
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
    if (change := _change(evidence)) is not None:
        lines.append(f"- by how much: {evidence['value']:g} against the reference {evidence['ref']:g} ({change})")
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
        ratio = evidence.get("B/A")
        cells = [
            failure.what,
            _number(evidence.get("value")),
            _number(evidence.get("ref")),
            _change(evidence) or "-",
            f"{ratio:.4f}" if isinstance(ratio, int | float) else "-",
            str(evidence.get("pairs", "-")),
            failure.reason,
        ]
        rows.append(_row(cells))
    return rows


def _row(cells: Sequence[str]) -> str:
    """One Markdown table row, its cells' pipes escaped and lines joined."""
    return "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"


def _check_table(failures: Sequence[Failure]) -> list[str]:
    """One row per failing golden check: the check and prompt, and why."""
    rows = ["| check | why |", "| --- | --- |"]
    return rows + [_row([failure.subject, failure.reason]) for failure in failures]


def _number(value: object) -> str:
    return f"{value:g}" if isinstance(value, int | float) else "-"


def _change(evidence: Mapping[str, Any]) -> str | None:
    """The measured value against its reference ("-29.9%"), where the evidence has both."""
    value, ref = evidence.get("value"), evidence.get("ref")
    if isinstance(value, int | float) and isinstance(ref, int | float) and ref:
        return f"{value / ref - 1:+.1%}"
    return None


@dataclass(frozen=True)
class CellNews:
    """What tonight changed among the cells an alert tracks."""

    joined: tuple[str, ...] = ()  # failing tonight for the first time in this alert
    again: tuple[str, ...] = ()  # had recovered, failing again
    recovered: tuple[str, ...] = ()  # measured within their references tonight

    def lines(self) -> list[str]:
        news = (("joined tonight", self.joined), ("failing again", self.again), ("recovered", self.recovered))
        return [f"- {label}: {', '.join(names)}" for label, names in news if names]


def track_cells(alert: dict[str, Any], outcome: Outcome, failures: Sequence[Failure], night: str) -> CellNews:
    """Record tonight in the alert's tracked cells: those failing (new, or again) and those recovered."""
    subjects: dict[str, dict[str, Any]] | None = alert.get("subjects")
    if subjects is None:
        return CellNews()
    failing = [f.subject for f in failures if f.subject]
    joined = tuple(s for s in failing if s not in subjects)
    again = tuple(s for s in failing if s in subjects and subjects[s]["recovered"])
    for subject in (*joined, *again):
        subjects[subject] = {"since": subjects.get(subject, {}).get("since", night), "recovered": None}
    recovered = tuple(_mark_recovered(alert, outcome, night, exclude=failing))
    return CellNews(joined, again, recovered)


def update_body(
    alert: Mapping[str, Any], failures: Sequence[Failure], news: CellNews, *, night: str, run_id: str
) -> str:
    """A later failing night: the cells still failing, and what changed among the tracked ones."""
    head = f"Still failing on {night} (run `{run_id}`), night {len(alert['nights'])} since {alert['opened']}"
    if "subjects" not in alert:
        return f"{head}: {failures[0].reason}\n"
    table = _check_table(failures) if alert.get("kind") == GOLDEN else _cell_table(failures)
    lines = [f"{head}.", "", *table, "", *news.lines()]
    return "\n".join(lines).rstrip("\n") + "\n"


def _mark_recovered(alert: dict[str, Any], outcome: Outcome, night: str, exclude: Sequence[str]) -> list[str]:
    """Mark the tracked subjects that passed tonight (a cell measured within its reference; a golden check of a
    golden stage that ran through); returns those newly recovered."""
    subjects: dict[str, dict[str, Any]] = alert["subjects"]
    cells = cells_of(outcome.numbers)
    golden_ran = "golden_s" in outcome.numbers  # every check was judged tonight; those not failing passed
    newly = []
    for subject, record in subjects.items():
        if alert.get("kind") == GOLDEN:
            passed = golden_ran
        else:
            measured = cells.get(subject)
            passed = measured is not None and measured.status in RECOVERED
        if subject not in exclude and record["recovered"] is None and passed:
            record["recovered"] = night
            newly.append(subject)
    return newly


def record_recoveries(alert: dict[str, Any], outcome: Outcome, night: str) -> bool:
    """Mark the tracked cells tonight measured within their references; True once every one has recovered (never
    for an alert that tracks no cells)."""
    subjects: dict[str, dict[str, Any]] | None = alert.get("subjects")
    if not subjects:
        return False
    _mark_recovered(alert, outcome, night, exclude=())
    return all(record["recovered"] for record in subjects.values())


def close_body(alert: Mapping[str, Any], night: str, run_id: str) -> str:
    """The closing comment: the night it passed, and when each tracked cell or check recovered."""
    subjects: Mapping[str, Mapping[str, Any]] = alert.get("subjects") or {}
    when = ", ".join(f"{s} on {r['recovered'] or night}" for s, r in sorted(subjects.items()))
    what = "check" if alert.get("kind") == GOLDEN else "cell"
    recovered = f" Every {what} recovered: {when}." if when else ""
    return f"Passed again on {night} (run `{run_id}`): closing.{recovered}\n"


def carry_over_cell_alerts(alerts: dict[str, Any], night: str, run_id: str) -> list[AlertEvent]:
    """Open alerts of the earlier one-per-cell (or one-per-check) form become one alert per entry and kind: the oldest
    (with its issue) tracks every cell or check, the others close with a pointer to it. Closed ones stay as they
    are."""
    by_entry: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for key, known in alerts.items():
        found = _CELL_ALERT.match(key)
        if found and known["open"]:
            subject = found["cell"].replace(":", " ", 1) if found["kind"] == GOLDEN else found["cell"]
            by_entry.setdefault((found["entry"], found["kind"]), []).append((key, subject))
    events: list[AlertEvent] = []
    for (entry, kind), old in sorted(by_entry.items()):
        old.sort(key=lambda item: (alerts[item[0]]["opened"], item[0]))
        target = golden_alert_key(entry) if kind == GOLDEN else perf_alert_key(entry)
        tracked = {cell: {"since": alerts[key]["opened"], "recovered": None} for key, cell in old}
        if target not in alerts or not alerts[target]["open"]:
            first_key, _ = old.pop(0)
            alerts[target] = (
                alerts.pop(first_key) | {"subjects": tracked} | ({"kind": GOLDEN} if kind == GOLDEN else {})
            )
            cells = ", ".join(sorted(alerts[target]["subjects"]))
            body = f"From {night} one alert tracks every {kind} failure of {entry}: this one now tracks {cells}.\n"
            events.append(AlertEvent(target, "updated", alerts[target]["title"], body, night, run_id))
        kept = alerts[target]
        where = f"#{kept['issue']} ({kept['title']})" if kept.get("issue") else f"the alert '{kept['title']}'"
        for key, cell in old:
            alerts[key]["open"] = False
            kept.setdefault("subjects", {}).setdefault(cell, tracked[cell])
            body = f"One alert now tracks every {kind} failure of an entry: {cell} continues in {where}.\n"
            events.append(AlertEvent(key, "closed", alerts[key]["title"], body, night, run_id))
    return events


def one_event_per_alert(events: Sequence[AlertEvent]) -> list[AlertEvent]:
    """Events of one key on one night as one (the last action, the bodies in order): a comment a night an alert."""
    merged: dict[str, AlertEvent] = {}
    for event in events:
        earlier = merged.get(event.key)
        merged[event.key] = replace(event, body=earlier.body + "\n" + event.body) if earlier else event
    return list(merged.values())
