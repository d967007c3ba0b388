"""Faults during a real night on the CPU engine: the engine killed mid-benchmark, a loaded host, Ctrl-C during
publish then --resume. Each ends with the right statuses and alerts, nothing bad published, no process left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from pipeline.cli import main
from pipeline.infra import procs
from pipeline.infra.releases import Asset, LocalReleaseStore, Release
from pipeline.outcome import Outcome
from pipeline.stages.prove.perf import run as perf_run
from pipeline.stages.release.publish import nightly_releases
from pipeline.status import Status
from tests.integration.conftest import (
    CPU_ENTRY,
    CpuEngine,
    Place,
    bench_one_case,
    beside_other_tests,
    golden_for_another_stage,
)

pytestmark = pytest.mark.integration


def _children() -> list[int]:
    return procs.descendants(os.getpid())


def test_the_engine_killed_during_the_benchmark_fails_the_entry_alerts_once_and_publishes_nothing(
    place: Place, cpu_engine: CpuEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_bench = perf_run.run_bench
    killed: list[int] = []

    def bench_while_the_engine_dies(*args: Any, **kwargs: Any) -> Any:
        servers = [pid for pid in _children() if procs._parent_of(pid) == os.getpid()]  # the vLLM server we booted
        assert len(servers) == 1, servers

        def kill() -> None:
            killed.append(servers[0])
            os.kill(servers[0], signal.SIGKILL)  # as the OOM killer would, in the middle of the measurement

        timer = threading.Timer(2.0, kill)
        timer.start()
        try:
            return real_bench(*args, **kwargs)
        finally:
            timer.cancel()

    monkeypatch.setattr(perf_run, "run_bench", bench_while_the_engine_dies)
    golden_for_another_stage(place)  # a shorter night; what is tested comes after golden
    beside_other_tests(place)  # the subject is the engine's death, not a timing: the parallel phase holds it
    assert main(["nightly", "--profile", "cpu", "--only", CPU_ENTRY]) == 6
    assert killed, "the benchmark ended before the engine could be killed"
    run = place.last_run()
    entry = run["entries"][0]  # type: ignore[index]
    assert (run["verdict"], entry["status"], entry["stage"]) == ("FAIL", "FAIL", "perf")
    assert entry["reason"].startswith("the engine failed during perf"), entry["reason"]
    assert [(a["key"], a["action"]) for a in run["alerts"]] == [(f"{CPU_ENTRY}:perf", "opened")]  # type: ignore[union-attr]
    assert not (place.root / "releases").exists() or nightly_releases(place.store.releases()) == []
    assert _children() == []  # the dead server's engine and workers were stopped too


@pytest.mark.quiet_host
def test_a_loaded_host_makes_the_night_inconclusive_without_blame_alerts_or_release(
    place: Place, cpu_engine: CpuEngine
) -> None:
    # one busy loop per core, started without our marker like any competing process
    env = {k: v for k, v in os.environ.items() if k != procs.OWNER_ENV}
    busy = "import time\nend = time.time() + 300\nwhile time.time() < end: pass"
    hogs = [subprocess.Popen([sys.executable, "-c", busy], env=env) for _ in range(os.cpu_count() or 1)]
    try:
        code = main(["nightly", "--profile", "cpu", "--only", CPU_ENTRY])
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    run = place.last_run()
    entry = run["entries"][0]  # type: ignore[index]
    assert (run["verdict"], entry["status"], entry["stage"]) == ("INCONCLUSIVE", "INCONCLUSIVE", "health")
    assert "host unhealthy" in entry["reason"] and any(str(h.pid) in entry["reason"] for h in hogs)
    # a throttled host is never mistaken for a regression: the only alert is the pipeline's own, that it saw nothing
    assert code != 0 and [(a["key"], a["action"]) for a in run["alerts"]] == [("pipeline:blind", "opened")]
    assert not (place.root / "releases").exists() or nightly_releases(place.store.releases()) == []
    assert not (place.runs / str(run["run_id"]) / "logs" / CPU_ENTRY / "server.log").exists()  # nothing booted
    assert _children() == []


# Four short-lived busy processes at a time, each living under half a second, for as long as the shell runs: what
# package installs, compilers or a user's scripts look like to a benchmark. No snapshot of processes sees them.
BURST = (
    "while :; do for _ in 1 2 3 4; do "
    f"{sys.executable} -c 'import time\nend = time.time() + 0.4\nwhile time.time() < end: pass' & "
    "done; wait; done"
)


@pytest.mark.quiet_host
def test_a_burst_of_short_lived_processes_during_perf_makes_the_night_inconclusive_never_fail(
    place: Place, cpu_engine: CpuEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    bench_one_case(place)
    golden_for_another_stage(place)  # a shorter night; what is tested comes after golden
    real_bench = perf_run.run_bench
    bursts: list[subprocess.Popen[bytes]] = []

    def bench_during_a_burst(*args: Any, **kwargs: Any) -> Any:
        env = {k: v for k, v in os.environ.items() if k != procs.OWNER_ENV}  # not ours, like a user's scripts
        bursts.append(subprocess.Popen(["bash", "-c", BURST], env=env, start_new_session=True))
        try:
            return real_bench(*args, **kwargs)
        finally:
            os.killpg(bursts[-1].pid, signal.SIGKILL)
            bursts[-1].wait()

    monkeypatch.setattr(perf_run, "run_bench", bench_during_a_burst)
    code = main(["nightly", "--profile", "cpu", "--only", CPU_ENTRY])
    run = place.last_run()
    entry = run["entries"][0]  # type: ignore[index]
    assert bursts and (code, run["verdict"], entry["stage"]) == (4, "INCONCLUSIVE", "perf"), entry["reason"]
    assert "over the" in entry["reason"] and "short-lived processes included" in entry["reason"], entry["reason"]
    window = entry["numbers"]["health"]["measurement"]["window"]
    print(f"\nburst window: {window}", file=sys.stderr)
    assert window["foreign_per_core"] > cpu_engine.config.matrix.profiles["cpu"].health["max_load_per_core"]
    assert [(a["key"], a["action"]) for a in run["alerts"]] == [("pipeline:blind", "opened")]  # no blame
    assert not (place.root / "releases").exists() or place.store.releases() == []
    assert _children() == []


def test_ctrl_c_during_publish_leaves_only_a_draft_and_resume_publishes_the_night_once(
    place: Place, cpu_engine: CpuEngine, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The night's entry has finished (as the nightly saves it); what is tested is publishing being interrupted.
    run_dir = place.runs / "20261122-020000"
    (run_dir / "entries").mkdir(parents=True)
    (run_dir / "night.json").write_text(json.dumps({"run_id": run_dir.name, "night": "2026-11-22", "profile": "cpu"}))
    finished = Outcome(CPU_ENTRY, Status.PASS, "perf", "4 cells within their references", True, 97.5)
    (run_dir / "entries" / f"{CPU_ENTRY}.json").write_text(json.dumps(finished.to_json()))
    real_upload = LocalReleaseStore.upload
    uploads: list[str] = []

    def upload_then_ctrl_c(self: LocalReleaseStore, release: Release, path: Path, name: str) -> Asset:
        asset = real_upload(self, release, path, name)
        uploads.append(name)
        if len(uploads) == 1:
            os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C, delivered between two uploads
        return asset

    monkeypatch.setattr(LocalReleaseStore, "upload", upload_then_ctrl_c)
    assert main(["nightly", "--profile", "cpu", "--only", CPU_ENTRY, "--run-id", run_dir.name]) == 130
    assert f"continue with `spark-nightly nightly --resume {run_dir.name}`" in capsys.readouterr().err
    assert uploads == ["lock.txt"]
    (draft,) = place.store.releases()
    assert draft.draft and nightly_releases(place.store.releases()) == []  # nothing half-published
    assert _children() == []

    assert main(["nightly", "--profile", "cpu", "--resume", run_dir.name, "--only", CPU_ENTRY]) == 0
    (release,) = place.store.releases()
    assert release.id == draft.id and not release.draft  # the same draft, finished and published
    assert sorted(a.name for a in release.assets) == ["index.json", "lock.txt", "manifest.json"]
    assert uploads.count("lock.txt") == 1  # kept: its digest matched
    run = json.loads((run_dir / "run.json").read_text())
    assert run["verdict"] == "PASS" and run["entries"][0]["duration_s"] == finished.duration_s  # not rerun
    (manifest_asset,) = [a for a in release.assets if a.name == "manifest.json"]
    place.store.download(release, manifest_asset, place.root / "manifest.json")
    manifest = json.loads((place.root / "manifest.json").read_text())
    assert manifest["run_id"] == run_dir.name and manifest["entries"][0]["status"] == "PASS"
    assert _children() == []
