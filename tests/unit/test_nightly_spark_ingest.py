"""A Spark night ingests what `build` made: refused wheels fail the night without booting anything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline import nightly
from pipeline.cli import main
from pipeline.stages.aftermath.alert import PIPELINE_KEY
from pipeline.stages.build.build_record import BuildRecord
from pipeline.stages.build.build_wheels import BuildResult
from pipeline.stages.build.inspect import ArtifactReport, WheelReport
from pipeline.stages.build.night_build import write_report
from pipeline.status import Status
from tests.wheelfactory import make_wheel

PROBLEM = "vllm/_C.so: no image for sm_121a: cubins sm_90"


def refused_build(root: Path, run_id: str) -> Path:
    """What `build --run-id` leaves when inspection refuses the wheel (no cubin for the Spark); returns the run dir."""
    run_dir, wheels = root / "runs" / run_id, root / "wheels" / run_id
    run_dir.mkdir(parents=True)
    wheels.mkdir(parents=True)
    version = "0.27.2.dev1+g0123456.d20261121"
    wheel = make_wheel(wheels, "vllm", version, {"_C.so": b"\x7fELF"})
    # the build record and the inspection as `build` writes them, by its own writers
    built = BuildResult("vllm", "k" * 24, False, (wheel,), 1.0, 1.0, "native", "native build: no earlier build")
    BuildRecord.of([built]).write(run_dir / "build.json")
    (run_dir / "plan.json").write_text(json.dumps({"version": 1, "created": "2026-11-21T01:00:00Z", "sources": []}))
    refused = WheelReport(wheel.name, "vllm", version, Status.FAIL, (PROBLEM,), (), ())
    write_report(run_dir / "inspect.json", ArtifactReport(Status.FAIL, (refused,), ()))
    return run_dir


def _settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, sub in (("PATHS_RUNS", "runs"), ("PATHS_STATE", "history"), ("PATHS_WHEELS", "wheels")):
        monkeypatch.setenv(f"SPARK_NIGHTLY_{key}", str(tmp_path / sub))
    monkeypatch.setenv("SPARK_NIGHTLY_PUBLISH_LOCAL_DIR", str(tmp_path / "releases"))


def _refused_night(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Settings pointed into tmp_path and a build whose wheels inspection refused; returns its run folder."""
    _settings(tmp_path, monkeypatch)
    return refused_build(tmp_path, "20261121-010000")


def test_a_spark_night_without_its_build_says_which_command_to_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _settings(tmp_path, monkeypatch)
    assert main(["nightly", "--profile", "spark", "--run-id", "20261121-010000"]) == 2
    assert "run `spark-nightly build --run-id 20261121-010000` first" in capsys.readouterr().err


def test_wheels_refused_by_inspection_fail_the_night_abort_every_entry_and_publish_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = _refused_night(tmp_path, monkeypatch)

    assert main(["nightly", "--profile", "spark", "--run-id", run_dir.name]) == 6
    run = json.loads((run_dir / "run.json").read_text())
    statuses = {e["entry"]: (e["status"], e["stage"]) for e in run["entries"]}
    assert statuses.pop("wheels") == ("FAIL", "inspect")
    assert set(statuses.values()) == {("ABORTED", "inspect")} and len(statuses) == 5
    assert run["verdict"] == "FAIL" and not (tmp_path / "releases").exists()
    assert [(a["key"], a["action"]) for a in run["alerts"]] == [("wheels:inspect", "opened")]
    assert PROBLEM in (run_dir / "alerts" / "wheels_inspect.opened.md").read_text()
    assert "release: nothing published" in capsys.readouterr().out


def test_a_crash_in_a_stage_still_alerts_and_reports_as_the_pipelines_failure_and_publishes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = _refused_night(tmp_path, monkeypatch)

    def broken_decide(outcomes: object) -> str:
        raise RuntimeError("a bug of ours in decide")

    monkeypatch.setattr(nightly, "decide", broken_decide)
    assert main(["nightly", "--profile", "spark", "--run-id", run_dir.name]) == 70
    run = json.loads((run_dir / "run.json").read_text())
    assert run["verdict"] == "CRASH" and not (tmp_path / "releases").exists()  # publish never ran
    alerts = [(a["key"], a["action"]) for a in run["alerts"]]
    assert alerts == [("wheels:inspect", "opened"), (PIPELINE_KEY, "opened")]  # what finished, and our own failure
    assert "a bug of ours in decide" in (run_dir / "alerts" / f"{PIPELINE_KEY}.opened.md").read_text()
    assert (run_dir / "report.html").exists() and (run_dir / "summary.md").exists()
    assert "the pipeline crashed" in capsys.readouterr().err
