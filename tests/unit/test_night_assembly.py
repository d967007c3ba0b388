"""The pieces a workflow assembles a night from: shards pinned to runners, a night started once with its selection,
the pipeline-failure alert for a broken job, what a step tells Actions, and state files shared by concurrent runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.cli import main
from pipeline.commands.nightly import shards
from pipeline.config.bundle import Config, ConfigPaths, load_config
from pipeline.infra import actions
from pipeline.nightly import plan_night
from pipeline.settings import Settings
from pipeline.stages.aftermath.alert import raise_alerts
from pipeline.stages.aftermath.durations import Durations

ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def config() -> Config:
    return load_config(ConfigPaths(ROOT / "models.yaml", ROOT / "thresholds", ROOT / "golden"))


def test_each_solo_entry_keeps_its_runner_whatever_is_selected(config: Config) -> None:
    full = shards(config, "spark", 2)
    assert [s["runner"] for s in full["shards"]] == ["spark-nightly-0", "spark-nightly-1"]
    assert full["cluster"] == "qwen3-235b-a22b-gptq-int4-tp2"  # two Sparks at once: after the shards, not in one
    runner_of = {model: s["runner"] for s in full["shards"] for model in s["models"].split()}
    last = list(runner_of)[-1]
    only = shards(config, "spark", 2, only=[last])
    assert only == {"shards": [{"runner": runner_of[last], "models": last}], "cluster": ""}  # its history is there


def test_a_night_is_started_once_and_its_selection_is_what_the_merge_runs(tmp_path: Path, config: Config) -> None:
    settings = Settings(runs_dir=str(tmp_path / "runs"), profile="spark")
    started = plan_night(settings, config, only=["gpt-oss-120b"], resume=None, run_id="r1")
    assert [e.id for e in started.entries] == ["gpt-oss-120b"]
    assert json.loads((tmp_path / "runs" / "r1" / "night.json").read_text())["entries"] == ["gpt-oss-120b"]
    merged = plan_night(settings, config, only=[], resume="r1")
    assert (merged.night, [e.id for e in merged.entries]) == (started.night, ["gpt-oss-120b"])
    shard = plan_night(settings, config, only=["qwen3.5-35b-a3b-fp8"], resume=None, run_id="r1")
    assert shard.night == started.night and [e.id for e in shard.entries] == ["qwen3.5-35b-a3b-fp8"]


def test_a_broken_job_opens_the_pipeline_alert_once_and_the_next_whole_night_closes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SPARK_NIGHTLY_PATHS_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("SPARK_NIGHTLY_PATHS_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("SPARK_NIGHTLY_PATHS_CONFIG", str(tmp_path / "no-config"))  # what broke may be the config
    what = "jobs: build failure, test skipped, cluster skipped, publish skipped; logs: https://github.com/o/r/runs/1"
    assert main(["pipeline-failed", "--run-id", "r1", "--what", what]) == 0
    assert main(["pipeline-failed", "--run-id", "r2", "--what", what]) == 0
    printed = capsys.readouterr().out
    assert "pipeline-failure alert opened" in printed and "pipeline-failure alert updated" in printed
    local = sorted((tmp_path / "runs").glob("*/alerts/*.md"))
    assert len(local) == 2 and what in local[0].read_text()
    state = tmp_path / "state" / "alerts.json"
    events = raise_alerts([], night="2026-11-24", run_id="r3", state_path=state, suspects="-")
    assert [(e.key, e.action) for e in events] == [("pipeline", "closed")]


def test_a_step_sets_outputs_summary_and_annotations_as_the_runner_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GITHUB_OUTPUT", str(tmp_path / "output"))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "summary"))
    actions.set_output("verdict", "FAIL")
    actions.set_output("notes", "one\ntwo")
    actions.append_summary("# night")
    actions.annotate_verdict("INCONCLUSIVE", "night 2026-11-23: INCONCLUSIVE\nhost busy, 50% of a core")
    lines = (tmp_path / "output").read_text().splitlines()
    assert lines[0] == "verdict=FAIL"
    assert lines[1].startswith("notes<<") and lines[2:4] == ["one", "two"] and lines[4] == lines[1][len("notes<<") :]
    assert (tmp_path / "summary").read_text() == "# night\n"
    assert capsys.readouterr().out == (
        "::warning title=spark-nightly%3A INCONCLUSIVE::night 2026-11-23: INCONCLUSIVE%0Ahost busy, 50%25 of a core\n"
    )


def test_two_runs_recording_durations_keep_each_others_steps(tmp_path: Path) -> None:
    path = tmp_path / "durations.json"
    night, bench = Durations(path), Durations(path)  # both read the file before either wrote
    night.record("entry-a", 100)
    bench.record("entry-b", 50)
    assert Durations(path).expected("entry-a") == 100 and Durations(path).expected("entry-b") == 50
