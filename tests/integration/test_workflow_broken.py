"""A night whose build job breaks, through nightly.yml as committed (run by act): nothing is decided or published, the
pipeline-failure job raises one issue (a second broken night comments on it), and no regression is blamed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.fakes.github import TOKEN, StandIn
from tests.integration.conftest import ROOT
from tests.integration.workflow_runs import cpu_actions, runner_environment, spark_runner

pytestmark = pytest.mark.integration


def test_a_broken_build_job_raises_the_pipeline_failure_issue_once(tmp_path: Path, stand_in: StandIn) -> None:
    config = tmp_path / "config"
    shutil.copytree(ROOT / "thresholds", config / "thresholds")
    shutil.copytree(ROOT / "golden", config / "golden")
    (config / "models.yaml").write_text("version: 1\nprofiles: {}\nmodels: [\n")  # a lab's config, broken
    runner = spark_runner(tmp_path)
    environment = runner_environment(runner, tmp_path / "cache", config, stand_in)
    actions = cpu_actions(runner, environment, stand_in)
    for night in (1, 2):
        run = actions.run("schedule", artifacts=tmp_path / f"artifacts-{night}")
        print(run.log())
        print(run.output[-3000:])
        assert "raise the pipeline-failure alert" in run.output and TOKEN not in run.output  # never in act's log
        assert {job: run.result(job) for job in run.jobs} == {
            "build": "failure",
            "test": "skipped",
            "cluster": "skipped",
            "publish": "skipped",
            "site": "skipped",
            "pipeline-failure": "success",
        }
    (issue,) = stand_in.state.issues.values()
    assert issue["title"] == "spark-nightly pipeline failure" and issue["state"] == "open"
    assert sorted(issue["labels"]) == ["pipeline-failure", "spark-nightly"]
    assert "jobs: build failure, test skipped, cluster skipped, publish skipped" in issue["body"]
    assert len(issue["comments"]) == 1  # the second broken night comments on the same issue
    assert stand_in.state.releases == {}
