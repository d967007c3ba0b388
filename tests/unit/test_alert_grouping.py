"""One regression, one alert: the cells of one entry that fail on one night are one alert, a cell that joins later
is a comment on it, it closes once every cell recovered, and alerts of the old one-per-cell form are carried over.
The same for golden: every failing check of an entry on a night is one alert, closed when its checks pass again."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.outcome import Failure, Outcome
from pipeline.stages.aftermath.alert import AlertEvent, raise_alerts
from pipeline.status import Status

ENTRY = "smollm2-135m-instruct"
SUSPECTS = "vllm main 0123456789ab..fedcba987654"
NUMBERS = {"pp128 (c1)": (250.6, 405.0, 0.828), "tg32 (c1)": (9.8, 18.7, 0.5361)}


def _cell_failure(cell: str) -> Failure:
    value, ref, ratio = NUMBERS[cell]
    metric = "pp_tps" if cell.startswith("pp") else "tg_tps"
    return Failure(
        f"{ENTRY}:perf",
        f"{cell} {metric}",
        f"tripped twice; B/A {ratio} over 8 pairs is below 0.94 and significant",
        {"value": value, "ref": ref, "B/A": ratio, "pairs": 8, "last confirmed build": "runtime runtime-ab12"},
        subject=cell,
    )


def _perf(failing: list[str], passing: list[str]) -> Outcome:
    cells = {c: {"status": "FAIL", "value": NUMBERS[c][0], "ref": NUMBERS[c][1]} for c in failing}
    cells |= {c: {"status": "PASS", "value": NUMBERS[c][1], "ref": NUMBERS[c][1]} for c in passing}
    status = Status.FAIL if failing else Status.PASS
    failures = tuple(_cell_failure(c) for c in failing)
    return Outcome(ENTRY, status, "perf", "; ".join(failing) or "ok", True, 300.0, {"cells": cells}, failures)


def _night(state: Path, night: str, outcome: Outcome) -> list[AlertEvent]:
    return raise_alerts([outcome], night=night, run_id=f"run-{night}", state_path=state, suspects=SUSPECTS)


def test_two_cells_failing_on_one_night_open_one_alert_listing_both(tmp_path: Path) -> None:
    (event,) = _night(tmp_path / "alerts.json", "2026-11-20", _perf(["pp128 (c1)", "tg32 (c1)"], []))
    assert (event.key, event.action) == (f"{ENTRY}:perf", "opened")
    assert event.title == f"{ENTRY}: performance regressed in pp128 (c1) pp_tps, tg32 (c1) tg_tps"
    for cell, (value, ref, ratio) in NUMBERS.items():
        row = next(line for line in event.body.splitlines() if line.startswith(f"| {cell} "))
        assert f"{value:g}" in row and f"{ref:g}" in row and f"{ratio:.4f}" in row, row
    assert f"suspect change: {SUSPECTS}" in event.body
    assert "runtime runtime-ab12" in event.body


def test_a_cell_that_joins_later_is_a_comment_and_the_alert_closes_when_every_cell_recovered(tmp_path: Path) -> None:
    state = tmp_path / "alerts.json"
    (opened,) = _night(state, "2026-11-20", _perf(["tg32 (c1)"], ["pp128 (c1)"]))
    (joined,) = _night(state, "2026-11-21", _perf(["pp128 (c1)", "tg32 (c1)"], []))
    assert (joined.key, joined.action) == (opened.key, "updated")
    assert "joined tonight: pp128 (c1)" in joined.body
    (partly,) = _night(state, "2026-11-22", _perf(["pp128 (c1)"], ["tg32 (c1)"]))
    assert partly.action == "updated" and "recovered: tg32 (c1)" in partly.body
    (closed,) = _night(state, "2026-11-23", _perf([], ["pp128 (c1)", "tg32 (c1)"]))
    assert (closed.key, closed.action) == (opened.key, "closed")
    assert _night(state, "2026-11-24", _perf([], ["pp128 (c1)", "tg32 (c1)"])) == []


def test_a_night_that_measures_no_cell_leaves_the_alert_as_it_is(tmp_path: Path) -> None:
    state = tmp_path / "alerts.json"
    _night(state, "2026-11-20", _perf(["pp128 (c1)", "tg32 (c1)"], []))
    unhealthy = Outcome(ENTRY, Status.INCONCLUSIVE, "health", "host unhealthy", True, 2.0)
    golden = Outcome(
        ENTRY,
        Status.FAIL,
        "golden",
        "1 failed",
        True,
        2.0,
        {},
        (Failure(f"{ENTRY}:golden", "g", "r", subject="exact paris"),),
    )
    assert [(e.key, e.action) for e in _night(state, "2026-11-21", unhealthy)] == [("pipeline:blind", "opened")]
    assert [(e.key, e.action) for e in _night(state, "2026-11-22", golden)] == [
        (golden.failures[0].key, "opened"),
        ("pipeline:blind", "closed"),  # golden measured something: the gate sees again
    ]
    alerts = json.loads(state.read_text())["alerts"]
    assert alerts[f"{ENTRY}:perf"]["open"]


def test_open_alerts_of_the_old_one_per_cell_form_are_carried_over_and_not_left_dangling(tmp_path: Path) -> None:
    state = tmp_path / "alerts.json"
    old = {
        f"{ENTRY}:perf:pp128 (c1)": {"open": True, "title": "pp", "opened": "2026-11-18", "nights": ["2026-11-18"]},
        f"{ENTRY}:perf:tg32 (c1)": {
            "open": True,
            "title": f"{ENTRY}: tg32 (c1) tg_tps regressed",
            "opened": "2026-11-17",
            "nights": ["2026-11-17", "2026-11-18"],
            "issue": 7,
        },
        f"{ENTRY}:perf:tg32 (c4)": {"open": False, "title": "old", "opened": "2026-11-01", "nights": ["2026-11-01"]},
    }
    state.write_text(json.dumps({"version": 1, "alerts": old}))
    unhealthy = Outcome(ENTRY, Status.INCONCLUSIVE, "health", "host unhealthy", True, 2.0)
    events = _night(state, "2026-11-19", unhealthy)
    assert [(e.key, e.action) for e in events] == [
        (f"{ENTRY}:perf", "updated"),  # the oldest open one, with its issue, now tracks both cells
        (f"{ENTRY}:perf:pp128 (c1)", "closed"),  # the other points to it
        ("pipeline:blind", "opened"),  # and the night measured nothing
    ]
    assert "continues in #7" in events[1].body
    alerts = json.loads(state.read_text())["alerts"]
    carried = alerts[f"{ENTRY}:perf"]
    assert carried["issue"] == 7 and carried["open"] and set(carried["subjects"]) == {"tg32 (c1)", "pp128 (c1)"}
    assert not alerts[f"{ENTRY}:perf:pp128 (c1)"]["open"]
    assert not alerts[f"{ENTRY}:perf:tg32 (c4)"]["open"]  # a closed one stays as it was
    closed = _night(state, "2026-11-20", _perf([], ["pp128 (c1)", "tg32 (c1)"]))
    assert [(e.key, e.action) for e in closed] == [(f"{ENTRY}:perf", "closed"), ("pipeline:blind", "closed")]


NAN_CHECKS = [
    *(f"drift {p}" for p in ("capital-of-france", "capital-of-germany", "two-plus-two", "water-symbol")),
    *(f"answers {p}" for p in ("capital-of-france", "two-plus-two", "water-symbol")),
    "nan corrupted-requests",
    "stop water-symbol",
    "tools required",
    "tools named",
    "schema json-object",
]


def _golden(failing: list[str]) -> Outcome:
    failures = tuple(Failure(f"{ENTRY}:golden", f"golden {c}", f"{c}: NaN in the logits", subject=c) for c in failing)
    reason = f"{len(failing)} golden check(s) failed"
    return Outcome(ENTRY, Status.FAIL, "golden", reason, True, 90.0, {"golden_s": 11.0}, failures)


def test_a_nan_build_failing_twelve_golden_checks_opens_one_alert_that_lists_them(tmp_path: Path) -> None:
    """The GPU's finding: a NaN build opened 12 alerts, one per failing golden check of one entry in one night."""
    (event,) = _night(tmp_path / "alerts.json", "2026-11-20", _golden(NAN_CHECKS))
    assert (event.key, event.action) == (f"{ENTRY}:golden", "opened")
    assert event.title == f"{ENTRY}: 12 golden check(s) failed: {', '.join(NAN_CHECKS[:3])} and 9 more"
    assert all(f"| {check} | {check}: NaN in the logits |" in event.body for check in NAN_CHECKS)
    assert f"suspect change: {SUSPECTS}" in event.body


def test_a_golden_check_that_keeps_failing_stays_named_and_the_alert_closes_when_golden_passes(tmp_path: Path) -> None:
    state = tmp_path / "alerts.json"
    (opened,) = _night(state, "2026-11-20", _golden(NAN_CHECKS[:3]))
    (partly,) = _night(state, "2026-11-21", _golden(NAN_CHECKS[2:3]))
    assert (partly.key, partly.action) == (opened.key, "updated")
    assert f"| {NAN_CHECKS[2]} |" in partly.body and f"recovered: {NAN_CHECKS[0]}, {NAN_CHECKS[1]}" in partly.body
    # failed at boot: golden said nothing tonight, the alert stays as it is
    booted_not = Outcome(ENTRY, Status.FAIL, "boot", "no server", True, 5.0, {}, (Failure("x:boot", "boot", "r"),))
    assert [e.key for e in _night(state, "2026-11-22", booted_not)] == ["x:boot"]
    assert json.loads(state.read_text())["alerts"][opened.key]["open"]
    perf_failed = _perf(["tg32 (c1)"], [])  # golden ran through and passed; the entry failed at perf
    perf_failed = Outcome(
        ENTRY, Status.FAIL, "perf", "slower", True, 9.0, {"golden_s": 3.0, **perf_failed.numbers}, perf_failed.failures
    )
    events = {e.key: e for e in _night(state, "2026-11-23", perf_failed)}
    assert events[opened.key].action == "closed" and events[f"{ENTRY}:perf"].action == "opened"
    assert (
        "Every check recovered" in events[opened.key].body
        and f"{NAN_CHECKS[2]} on 2026-11-23" in events[opened.key].body
    )


def test_open_golden_alerts_of_the_old_one_per_check_form_become_one(tmp_path: Path) -> None:
    state = tmp_path / "alerts.json"
    old = {
        f"{ENTRY}:golden:drift:capital-of-france": {
            "open": True,
            "title": "a",
            "opened": "2026-11-18",
            "nights": ["2026-11-18"],
            "issue": 3,
        },
        f"{ENTRY}:golden:nan:corrupted-requests": {
            "open": True,
            "title": "b",
            "opened": "2026-11-18",
            "nights": ["2026-11-18"],
            "issue": 4,
        },
    }
    state.write_text(json.dumps({"version": 1, "alerts": old}))
    events = _night(state, "2026-11-19", _golden(["drift capital-of-france"]))
    assert [(e.key, e.action) for e in events] == [
        (f"{ENTRY}:golden", "updated"),
        (f"{ENTRY}:golden:nan:corrupted-requests", "closed"),
    ]
    alerts = json.loads(state.read_text())["alerts"]
    kept = alerts[f"{ENTRY}:golden"]
    assert kept["issue"] == 3 and kept["kind"] == "golden"
    assert set(kept["subjects"]) == {"drift capital-of-france", "nan corrupted-requests"}
    assert kept["subjects"]["nan corrupted-requests"]["recovered"] == "2026-11-19"
