"""act and the stand-ins it runs: ci.yml's jobs as act plans them for each event, and the artifact stand-in run as a
composite action runs it (its inputs as variables, its failure as the step's)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.integration.conftest import ROOT
from tests.workflow_act import STAND_INS, Actions, Runner

pytestmark = pytest.mark.integration

CI = ROOT / ".github" / "workflows" / "ci.yml"


def test_act_starts_every_job_of_ci_yml_on_a_push_and_a_pull_request_and_none_on_a_schedule(tmp_path: Path) -> None:
    # ci.yml's one job is this suite itself (.ci/run): executing it here would run the suite inside itself, so act
    # plans it
    actions = Actions(CI, ROOT, Runner(tmp_path / "runner"), repository="o/r", runner_env={"PATH": os.environ["PATH"]})
    jobs = set(yaml.safe_load(CI.read_text())["jobs"])
    assert jobs == {"test"}
    for event in ("push", "pull_request"):
        planned = actions.plan(event)
        assert sorted(job for _, job in planned) == sorted(jobs) and {stage for stage, _ in planned} == {0}, planned
    assert actions.plan("schedule") == []
    nightly = Actions(
        ROOT / ".github" / "workflows" / "nightly.yml",
        ROOT,
        Runner(tmp_path / "spark"),
        repository="o/r",
        runner_env={"PATH": os.environ["PATH"]},
    )
    stages = {job: stage for stage, job in nightly.plan("schedule")}
    assert stages == {"build": 0, "test": 1, "cluster": 2, "publish": 3, "site": 4, "pipeline-failure": 4}


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_the_stand_in_reads_its_inputs_as_a_composite_action_passes_them_and_fails_its_step(tmp_path: Path) -> None:
    workspace, store = tmp_path / "workspace", tmp_path / "artifacts"
    (workspace / "out").mkdir(parents=True)
    (workspace / "out" / "f.txt").write_text("1")
    base = {k: v for k, v in os.environ.items() if not k.startswith("INPUT_")} | {"ARTIFACT_STORE": str(store)}
    inputs = {"INPUT_NAME": "wheels", "INPUT_PATH": "out", "INPUT_IF_NO_FILES_FOUND": "error"}
    upload = [sys.executable, str(STAND_INS / "artifacts.py"), "upload"]
    env = base | inputs
    ok = subprocess.run(upload, cwd=workspace, env=env, text=True, capture_output=True, check=False)
    assert ok.returncode == 0 and _files(store) == ["wheels/f.txt"], ok.stdout + ok.stderr
    again = subprocess.run(upload, cwd=workspace, env=env, text=True, capture_output=True, check=False)
    assert again.returncode == 1 and again.stdout.startswith("::error::Failed to CreateArtifact"), again.stdout
