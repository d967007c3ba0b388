"""The workflows hold no logic and keep GitHub's rules: checked against the workflow schema and by actionlint."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft7Validator

from pipeline.infra import procs

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
SCHEMA = ROOT / "tests" / "data" / "github-api" / "github-workflow.schema.json"
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def _load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    if True in data:  # YAML 1.1 reads the key `on` as a boolean
        data["on"] = data.pop(True)
    return data


def test_both_workflows_exist() -> None:
    assert [w.name for w in WORKFLOWS] == ["ci.yml", "nightly.yml"]


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_each_workflow_matches_githubs_schema(workflow: Path) -> None:
    validator = Draft7Validator(json.loads(SCHEMA.read_text()))
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(_load(workflow))]
    assert errors == []


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_each_workflow_is_locked_down(workflow: Path) -> None:
    data = _load(workflow)
    assert data["permissions"] == {}
    for name, job in data["jobs"].items():
        assert "timeout-minutes" in job, f"{name} has no timeout"
        for step in job["steps"]:
            if "uses" in step:
                action, _, ref = step["uses"].partition("@")
                assert len(ref) == 40 and all(c in "0123456789abcdef" for c in ref), f"{action} is not pinned by SHA"
            assert "run" not in step or len(step["run"].splitlines()) <= 4, "a workflow step holds logic"


def test_actionlint_finds_nothing(tmp_path: Path) -> None:
    actionlint = shutil.which("actionlint") or str(Path(__file__).parents[2] / ".venv" / "bin" / "actionlint")
    result = procs.run(
        [actionlint, "-no-color", *map(str, WORKFLOWS)],
        tmp_path / "actionlint.log",
        timeout_s=120,
        check=False,
        cwd=ROOT,  # where actionlint finds .github/actionlint.yaml (the Spark runner label)
    )
    assert result.returncode == 0, (tmp_path / "actionlint.log").read_text()
