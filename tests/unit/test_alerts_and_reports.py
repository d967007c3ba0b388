"""Alerts open once, update, and close on recovery; reports render what a person reads, compared with golden files."""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree

import pytest

from pipeline.outcome import Failure, Outcome
from pipeline.stages.aftermath.alert import raise_alerts, write_local
from pipeline.stages.aftermath.report import render_junit, render_summary
from pipeline.status import Status

GOLDEN = Path(__file__).parents[1] / "data" / "alerts"
SUSPECTS = (
    "vllm main 0123456789ab..fedcba987654 (https://github.com/vllm-project/vllm/compare/0123456789ab...fedcba987654)"
)


def _failing(night: str) -> Outcome:
    return Outcome(
        "smollm2-135m-instruct",
        Status.FAIL,
        "perf",
        "tg32 (c1): tripped twice, paired with the last good build: B/A 0.7262",
        True,
        301.5,
        {"cells": {"tg32 (c1)": {"value": 13.1, "ref": 18.7}}},
        (
            Failure(
                "smollm2-135m-instruct:perf",
                "tg32 (c1) tg_tps",
                "B/A 0.7262 over 8 pairs is below 0.98 and significant",
                {"value": 13.1, "ref": 18.7},
                subject="tg32 (c1)",
            ),
        ),
    )


def _passing() -> Outcome:
    return Outcome("smollm2-135m-instruct", Status.PASS, "perf", "4 cells within their references", True, 280.0)


def _night(state: Path, night: str, outcome: Outcome, crash: str | None = None) -> list[tuple[str, str]]:
    events = raise_alerts(
        [outcome], night=night, run_id=f"run-{night}", state_path=state, suspects=SUSPECTS, crash=crash
    )
    return [(e.key, e.action) for e in events]


def test_three_failing_nights_open_one_alert_update_it_twice_and_recovery_closes_it(tmp_path: Path) -> None:
    state = tmp_path / "alerts.json"
    key = "smollm2-135m-instruct:perf"
    assert _night(state, "2026-11-19", _passing()) == []
    assert _night(state, "2026-11-20", _failing("2026-11-20")) == [(key, "opened")]
    assert _night(state, "2026-11-21", _failing("2026-11-21")) == [(key, "updated")]
    assert _night(state, "2026-11-22", _failing("2026-11-22")) == [(key, "updated")]
    assert _night(state, "2026-11-23", _passing()) == [(key, "closed")]
    assert _night(state, "2026-11-24", _passing()) == []
    assert _night(state, "2026-11-25", _failing("2026-11-25")) == [(key, "opened")]  # a new regression, a new alert


def test_an_inconclusive_night_neither_opens_nor_closes(tmp_path: Path) -> None:
    state = tmp_path / "alerts.json"
    _night(state, "2026-11-20", _failing("2026-11-20"))
    unhealthy = Outcome("smollm2-135m-instruct", Status.INCONCLUSIVE, "health", "host unhealthy", True, 2.0)
    # the regression alert stays as it is; a night that measured nothing is the pipeline's own alert, not a verdict
    assert _night(state, "2026-11-21", unhealthy) == [("pipeline:blind", "opened")]
    assert _night(state, "2026-11-22", _passing()) == [
        ("smollm2-135m-instruct:perf", "closed"),
        ("pipeline:blind", "closed"),
    ]


def test_a_pipeline_crash_is_its_own_alert_and_blames_no_entry(tmp_path: Path) -> None:
    state = tmp_path / "alerts.json"
    events = raise_alerts([], night="2026-11-21", run_id="r", state_path=state, suspects=SUSPECTS, crash="KeyError: x")
    assert [(e.key, e.action, e.title) for e in events] == [("pipeline", "opened", "spark-nightly pipeline failure")]
    assert "no wheel is blamed" in events[0].body
    closed = raise_alerts([_passing()], night="2026-11-22", run_id="r2", state_path=state, suspects=SUSPECTS)
    assert [(e.key, e.action) for e in closed] == [("pipeline", "closed")]


@pytest.mark.parametrize("action", ["opened", "updated", "closed"])
def test_rendered_alert_bodies_match_their_golden_markdown(tmp_path: Path, action: str) -> None:
    state = tmp_path / "alerts.json"
    _night(state, "2026-11-19", _passing())
    nights = {"opened": ["2026-11-20"], "updated": ["2026-11-20", "2026-11-21"], "closed": ["2026-11-20"]}[action]
    for night in nights:
        events = raise_alerts(
            [_failing(night)], night=night, run_id=f"run-{night}", state_path=state, suspects=SUSPECTS
        )
    if action == "closed":
        events = raise_alerts(
            [_passing()], night="2026-11-22", run_id="run-2026-11-22", state_path=state, suspects=SUSPECTS
        )
    write_local(events, tmp_path / "out")
    (written,) = sorted((tmp_path / "out").glob(f"*.{action}.md"))
    assert written.read_text() == (GOLDEN / f"{action}.md").read_text()


def test_the_summary_lists_gaps_to_references_from_other_builds() -> None:
    run = {"run_id": "r1", "night": "2026-11-25", "profile": "spark", "verdict": "PASS", "publish": ""}
    gap = "-22.0% against a reference measured on another build (the community's patched image)"
    cells = {"tg32": {"status": "PASS", "value": 41.2, "ref": 52.85, "gap": gap}, "pp2048": {"status": "PASS"}}
    outcome = Outcome("qwen3.5-35b-a3b-fp8", Status.PASS, "perf", "gaps", True, 900.0, numbers={"cells": cells})
    summary = render_summary(run, [outcome])
    assert summary.endswith(
        "## Gaps to references measured elsewhere: another build or host (reported, not blamed on tonight's wheels)\n\n"
        f"- qwen3.5-35b-a3b-fp8 tg32: {gap}\n"
    )
    assert "Gaps to references" not in render_summary(run, [Outcome("x", Status.PASS, "perf", "ok", True, 1.0)])


def test_the_summary_says_what_tonights_build_was_and_what_its_inspection_noted() -> None:
    run = {"run_id": "r1", "night": "2026-11-27", "profile": "gpu-built", "verdict": "PASS", "publish": ""}
    jit = "flashinfer-python 0.6.14 has no AOT kernel wheel tonight (flashinfer-cubin, flashinfer-jit-cache): ..."
    why = "overlay on f80647f341b3: only Python changed (3 files)"
    built = run | {"inspection": {"builds": [{"family": "vllm", "kind": "overlay", "why": why}], "notes": [jit]}}
    summary = render_summary(built, [Outcome("x", Status.PASS, "perf", "ok", True, 1.0)])
    assert (
        "## Tonight's build\n\n- vllm: overlay: overlay on f80647f341b3: only Python changed (3 files)\n"
        f"- note: {jit}\n"
    ) in summary
    assert "Tonight's build" not in render_summary(run, [Outcome("x", Status.PASS, "perf", "ok", True, 1.0)])


def test_the_summary_says_what_boots_in_turns_cost_the_night() -> None:
    run = {"run_id": "r1", "night": "2026-11-25", "profile": "spark", "verdict": "FAIL", "publish": ""}
    turns = {"turns": {"boots": 5, "boot_s": 1012.4}}
    outcomes = [
        Outcome("gpt-oss-120b", Status.FAIL, "perf", "slower", True, 2100.0, numbers=turns),
        Outcome("qwen", Status.PASS, "perf", "ok", True, 900.0),
    ]
    assert "Boots in turns: 5, 1012 s booting (gpt-oss-120b 5 (1012 s))." in render_summary(run, outcomes)


def test_the_summary_says_how_each_cluster_entry_was_split_over_which_hosts_and_how_long_its_boot_took() -> None:
    run = {"run_id": "r1", "night": "2026-11-28", "profile": "gpu", "verdict": "PASS", "publish": ""}
    hosts = ["spark-a (fast0 10.125.1.1)", "spark-b (fast0 10.125.1.2)"]
    up = {"cluster": {"split": "pipeline parallel 2", "hosts": hosts, "ready_s": 18.2}, "boot_s": 199.3}
    lost = {"cluster": {"split": "tensor parallel 2", "hosts": hosts}}  # the worker's Ray never joined
    outcomes = [
        Outcome("smollm2-pp2", Status.PASS, "perf", "ok", False, 262.0, numbers=up),
        Outcome("qwen3-tp2", Status.FAIL, "cluster", "node spark-b: worker: ...", False, 40.0, numbers=lost),
        Outcome("smollm2", Status.PASS, "perf", "ok", True, 300.0, numbers={"boot_s": 180.0}),
    ]
    summary = render_summary(run, outcomes)
    assert "## Served across hosts" in summary
    assert (
        "- smollm2-pp2: pipeline parallel 2 over spark-a (fast0 10.125.1.1), spark-b (fast0 10.125.1.2); "
        "hosts up in 18 s, the server ready 199 s after\n"
    ) in summary
    assert "- qwen3-tp2: tensor parallel 2 over spark-a (fast0 10.125.1.1), spark-b " in summary
    assert "spark-b (fast0 10.125.1.2); the hosts did not come up\n" in summary
    assert "- smollm2:" not in summary  # one host: nothing to say
    assert "Served across hosts" not in render_summary(run, outcomes[2:])


def test_summary_and_junit_show_every_entry_with_its_status() -> None:
    run = {"run_id": "r1", "night": "2026-11-21", "profile": "cpu", "verdict": "FAIL", "publish": ""}
    optional = Outcome("other", Status.PASS, "perf", "ok", False, 10.0)
    summary = render_summary(run, [_failing("2026-11-21"), optional])
    assert summary == (GOLDEN / "summary.md").read_text()
    suite = ElementTree.fromstring(render_junit(run, [_failing("2026-11-21"), optional]))
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("2", "1", "0")
    assert suite.find("testcase/failure").get("type") == "perf"
