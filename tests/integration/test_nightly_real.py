"""Whole nights on the real CPU engine: a good night is published and its build confirmed; a slower build FAILs at
perf by its pairs against that build and alerts once; a broken model then fails at golden, alerts once per check,
publishes nothing; the good build and model's night closes every alert; an interrupted run resumes without redoing
finished entries."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from pipeline.cli import main
from pipeline.infra.confirmed import ConfirmedBook, series_key
from pipeline.infra.runtime import runtime_key, runtime_root
from pipeline.stages.release.publish import nightly_releases
from tests.integration.broken_models import make_broken
from tests.integration.conftest import CPU_ENTRY, CpuEngine, Place, bench_one_case
from tests.integration.planted import plant_slowdown

pytestmark = [pytest.mark.integration, pytest.mark.quiet_host]

# About 70-80 % of a decode step here (tg32 c1 decodes at ~19 t/s): tg32 drops ~40 %, past its warn level,
# so it trips with one night of history; prefill (one step per prompt) drops ~12 % and does not.
PLANTED_DELAY_S = 0.04


def _edit_entry(place: Place, change: dict[str, object]) -> None:
    models = place.root / "config" / "models.yaml"
    data = yaml.safe_load(models.read_text())
    for entry in data["models"]:
        if entry["id"] == CPU_ENTRY:
            entry.update(change)
    models.write_text(yaml.safe_dump(data, sort_keys=False))


def _serve_broken_weights(place: Place, cpu_engine: CpuEngine) -> None:
    """Point the CPU entry at a copy of its model with random weights: fluent-looking garbage."""
    _edit_entry(place, {"weights": {"from": "path", "path": str(make_broken(cpu_engine, place.root, "random"))}})


def _require(place: Place, requirements: list[str]) -> None:
    models = place.root / "config" / "models.yaml"
    data = yaml.safe_load(models.read_text())
    data["profiles"]["cpu"]["candidate"]["requirements"] = requirements
    models.write_text(yaml.safe_dump(data, sort_keys=False))


@contextmanager
def planted_runtime(cpu_engine: CpuEngine, requirements: list[str]) -> Iterator[Path]:
    """The runtime the profile gets for `requirements`: the good one with a sleep planted in every engine step."""
    good = cpu_engine.candidate.runtime
    assert good is not None
    profile = cpu_engine.config.matrix.profiles["cpu"]
    root = runtime_root(profile.name, requirements, profile.candidate_remove, cpu_engine.cache_dir)
    key = runtime_key(requirements, profile.candidate_remove)
    try:
        yield plant_slowdown(good.root, root, PLANTED_DELAY_S, key=key)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_slower_build_fails_against_the_last_confirmed_one_and_a_broken_model_alerts_once(
    place: Place, cpu_engine: CpuEngine
) -> None:
    bench_one_case(place)  # keeps each night short; the judgement is the same for every case
    assert main(["nightly", "--profile", "cpu"]) == 0
    assert place.last_run()["verdict"] == "PASS"
    assert [r.tag for r in nightly_releases(place.store.releases())] != []
    published = len(place.store.releases())
    good_build = _a_of(place, "tg32")
    release = nightly_releases(place.store.releases())[-1]
    (manifest,) = [a for a in release.assets if a.name == "manifest.json"]
    place.store.download(release, manifest, place.root / "manifest.json")
    health = json.loads((place.root / "manifest.json").read_text())["health"][CPU_ENTRY]  # the night's health record
    assert health["before"]["healthy"] and health["measurement"]["window"]["foreign_per_core"] < 0.1, health
    assert good_build.startswith("runtime-")  # the first good night's build became A

    shutil.copy(place.root / "config" / "models.yaml", place.root / "models.good.yaml")
    pinned = [*cpu_engine.config.matrix.profiles["cpu"].candidate_requirements, "planted-slowdown==1"]
    with planted_runtime(cpu_engine, pinned):
        _require(place, pinned)
        assert main(["nightly", "--profile", "cpu"]) == 6
        run = place.last_run()
        entry = run["entries"][0]  # type: ignore[index]
        assert (run["verdict"], entry["stage"]) == ("FAIL", "perf"), entry["reason"]
        assert "tg32: tripped twice" in entry["reason"], entry["reason"]
        assert f"paired with the last confirmed build (runtime {good_build}" in entry["reason"], entry["reason"]
        ratio = entry["numbers"]["cells"]["tg32"]["b_over_a"]
        assert ratio < 0.8 and f"B/A {ratio:.4f}" in entry["reason"], entry["reason"]
        assert [(a["key"], a["action"]) for a in run["alerts"]] == [(f"{CPU_ENTRY}:perf:tg32", "opened")]  # type: ignore[union-attr]
        assert len(place.store.releases()) == published
        assert _a_of(place, "tg32") == good_build  # the slower build never becomes A
    shutil.copy(place.root / "models.good.yaml", place.root / "config" / "models.yaml")  # the good runtime again
    perf_key = f"{CPU_ENTRY}:perf:tg32"

    _serve_broken_weights(place, cpu_engine)
    opened: list[str] = []
    for night in range(2):  # two failing nights: one alert per failing check, opened once, then updated
        assert main(["nightly", "--profile", "cpu"]) == 6
        run = place.last_run()
        assert run["verdict"] == "FAIL"
        alerts = run["alerts"]
        assert isinstance(alerts, list)
        if night == 0:
            opened = sorted(a["key"] for a in alerts)
            assert opened and {a["action"] for a in alerts} == {"opened"}
        else:  # the same keys, never a second alert for one of them
            assert sorted(a["key"] for a in alerts) == opened and {a["action"] for a in alerts} == {"updated"}
    assert len(place.store.releases()) == published  # nothing bad published
    golden_alerts = {k: v for k, v in place.alerts().items() if ":golden:" in k}
    assert sorted(golden_alerts) == opened
    assert all(alert["open"] and len(alert["nights"]) == 2 for alert in golden_alerts.values())  # type: ignore[arg-type]
    assert place.alerts()[perf_key]["open"]  # a night that failed earlier, at golden, never closes the perf alert

    shutil.copy(place.root / "models.good.yaml", place.root / "config" / "models.yaml")
    assert main(["nightly", "--profile", "cpu", "--only", CPU_ENTRY]) == 0  # the good build and model: all fixed
    closed = place.last_run()["alerts"]
    assert sorted(a["key"] for a in closed) == sorted([*opened, perf_key])  # type: ignore[union-attr]
    assert {a["action"] for a in closed} == {"closed"}  # type: ignore[union-attr]
    assert not any(alert["open"] for alert in place.alerts().values())


def _a_of(place: Place, cell: str) -> str:
    book = ConfirmedBook(place.root / "history" / "confirmed.json")
    found = book.last_good(series_key("cpu-x86", CPU_ENTRY, cell, "tg_tps"))
    assert found is not None
    return found[0].id


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
