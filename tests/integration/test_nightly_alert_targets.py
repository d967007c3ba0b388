"""The nightly delivers its alerts to the configured target: a refused Spark night, twice, through the CLI, opens one
GitHub issue (labelled, with the evidence and the suspect) and then comments on it, never showing the token."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.cli import main
from tests.fakes.github import TOKEN, StandIn
from tests.unit.test_nightly_spark_ingest import PROBLEM, refused_build

pytestmark = pytest.mark.integration


def test_two_refused_nights_open_one_labelled_issue_then_comment_on_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stand_in: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    for key, sub in (("PATHS_RUNS", "runs"), ("PATHS_STATE", "history"), ("PATHS_WHEELS", "wheels")):
        monkeypatch.setenv(f"SPARK_NIGHTLY_{key}", str(tmp_path / sub))
    monkeypatch.setenv("SPARK_NIGHTLY_ALERT_TARGET", "github")
    monkeypatch.setenv("SPARK_NIGHTLY_ALERT_REPO", stand_in.repo)
    monkeypatch.setenv("SPARK_NIGHTLY_GITHUB_API_URL", stand_in.url)
    monkeypatch.setenv("SPARK_NIGHTLY_GITHUB_ALLOW_CUSTOM_API", "1")  # plain http, a token variable of our own
    monkeypatch.setenv("SPARK_NIGHTLY_GITHUB_TOKEN_ENV", "NIGHTLY_ALERT_TOKEN")
    monkeypatch.setenv("NIGHTLY_ALERT_TOKEN", TOKEN)

    for night, run_id in enumerate(("20261121-010000", "20261122-010000")):
        if night == 1:  # on Actions the link is the workflow run, whose summary and artifacts hold the report
            for name, value in (("SERVER_URL", "https://github.com"), ("REPOSITORY", "o/r"), ("RUN_ID", "77")):
                monkeypatch.setenv(f"GITHUB_{name}", value)
        run_dir = refused_build(tmp_path, run_id)
        assert main(["nightly", "--profile", "spark", "--run-id", run_id]) == 6
        run = json.loads((run_dir / "run.json").read_text())
        assert run["alert_problems"] == []
        assert [(a["key"], a["action"]) for a in run["alerts"]] == [
            ("wheels:inspect", "opened" if night == 0 else "updated")
        ]

    (issue,) = stand_in.state.issues.values()
    assert issue["state"] == "open"
    assert set(issue["labels"]) >= {"spark-nightly", "regression"}
    assert PROBLEM in issue["body"] and "no good night recorded yet" in issue["body"]
    assert f"- report: {tmp_path / 'runs' / '20261121-010000' / 'report.html'}" in issue["body"]
    (comment,) = issue["comments"]
    assert "20261122-010000" in comment["body"] and "Report: https://github.com/o/r/actions/runs/77" in comment["body"]
    printed = capsys.readouterr()
    assert TOKEN not in printed.out + printed.err + json.dumps(stand_in.state.issues, default=str)
