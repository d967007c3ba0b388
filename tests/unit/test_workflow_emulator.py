"""The workflow emulator keeps GitHub's documented rules: expressions, artifacts, and the command line it runs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pipeline.cli import build_parser
from tests.workflow_emulator import Emulator, Runner, WorkflowError, WorkflowRun, _download, _upload, cli_problems
from tests.workflow_expressions import Evaluator

ROOT = Path(__file__).parents[2]


def _evaluate(expression: str, **contexts: object) -> object:
    status = {"success": lambda: True, "failure": lambda: False, "always": lambda: True, "cancelled": lambda: False}
    return Evaluator(contexts, status).evaluate(expression)


def test_expressions_follow_the_documented_operators() -> None:
    assert _evaluate("inputs.runners || vars.RUNNERS || 1", inputs={"runners": ""}, vars={}) == 1
    assert _evaluate("inputs.runners || vars.RUNNERS || 1", inputs={}, vars={"RUNNERS": "2"}) == "2"
    assert _evaluate("needs.build.result == 'SUCCESS'", needs={"build": {"result": "success"}}) is True  # no case
    assert _evaluate("needs.b.outputs.shards != '[]'", needs={"b": {"outputs": {"shards": "[]"}}}) is False
    assert _evaluate(
        "contains(needs.*.result, 'failure')", needs={"a": {"result": "success"}, "b": {"result": "failure"}}
    )
    assert _evaluate('fromJSON(\'[{"runner": "x"}]\')[0].runner') == "x"
    assert _evaluate("!(1 == '1') && true") is False  # a string is coerced to a number against a number
    with pytest.raises(ValueError, match="unknown context"):
        _evaluate("nope.x")


def _runner(tmp_path: Path) -> Runner:
    runner = Runner("r", frozenset({"self-hosted"}), tmp_path / "runner")
    runner.workspace.mkdir(parents=True)
    return runner


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_an_artifact_name_is_taken_once_per_run_unless_overwritten(tmp_path: Path) -> None:
    runner, run = _runner(tmp_path), WorkflowRun(1, 1, artifacts=tmp_path / "artifacts")
    (runner.workspace / "a.txt").write_text("1")
    _upload({"name": "x", "path": "a.txt"}, runner, run)
    with pytest.raises(WorkflowError, match=r"\(409\) Conflict"):
        _upload({"name": "x", "path": "a.txt"}, runner, run)
    _upload({"name": "x", "path": "a.txt", "overwrite": "true"}, runner, run)


def test_an_artifact_is_rooted_at_the_common_ancestor_of_its_paths_and_leaves_hidden_files_out(tmp_path: Path) -> None:
    runner, run = _runner(tmp_path), WorkflowRun(1, 1, artifacts=tmp_path / "artifacts")
    for name in ("runs/r1/night.json", "runs/r1/.hidden", "runs/r1/x/a.whl", "runs/r1/x/b.txt"):
        (runner.workspace / name).parent.mkdir(parents=True, exist_ok=True)
        (runner.workspace / name).write_text("x")
    # wheels/r1 matches nothing, yet counts for the root: the artifact keeps runs/ and wheels/ at its top
    _upload({"name": "build", "path": "runs/r1\nwheels/r1\n!runs/r1/**/*.whl"}, runner, run)
    assert _files(tmp_path / "artifacts" / "build") == ["runs/r1/night.json", "runs/r1/x/b.txt"]
    _upload({"name": "one", "path": "runs/r1/x"}, runner, run)  # one folder: its contents at the top
    assert _files(tmp_path / "artifacts" / "one") == ["a.whl", "b.txt"]


def test_a_pattern_download_puts_each_artifact_in_its_own_folder_unless_merged(tmp_path: Path) -> None:
    runner, run = _runner(tmp_path), WorkflowRun(1, 1, artifacts=tmp_path / "artifacts")
    for shard in ("shard-0", "shard-1", "other"):
        (tmp_path / "artifacts" / shard / "entries").mkdir(parents=True)
        (tmp_path / "artifacts" / shard / "entries" / f"{shard}.json").write_text("{}")
    _download({"pattern": "shard-*", "path": "apart"}, runner, run)
    assert _files(runner.workspace / "apart") == ["shard-0/entries/shard-0.json", "shard-1/entries/shard-1.json"]
    _download({"pattern": "shard-*", "path": "merged", "merge-multiple": "true"}, runner, run)
    assert _files(runner.workspace / "merged") == ["entries/shard-0.json", "entries/shard-1.json"]
    with pytest.raises(WorkflowError, match="Artifact not found"):
        _download({"name": "build-missing"}, runner, run)


def test_the_committed_workflow_names_only_commands_and_flags_the_cli_has(tmp_path: Path) -> None:
    workflow = ROOT / ".github" / "workflows" / "nightly.yml"
    problems = [
        p
        for job in yaml.safe_load(workflow.read_text())["jobs"].values()
        for step in job["steps"]
        for p in cli_problems(step.get("run", ""), build_parser())
    ]
    assert problems == []
    broken = tmp_path / "broken.yml"
    broken.write_text(workflow.read_text().replace("--merge --actions", "--merge --actoins"))
    with pytest.raises(WorkflowError, match="`spark-nightly nightly` has no flag --actoins"):
        Emulator(
            broken, ROOT, [], repository="o/r", runner_env={}, check_command=lambda s: cli_problems(s, build_parser())
        )
    assert cli_problems('.venv/bin/spark-nightly nightlies --run-id "$R"', build_parser()) == [
        "`spark-nightly nightlies`: no such command"
    ]
    assert cli_problems(
        "x=1 ${MODELS:+--onlyy $MODELS}; .venv/bin/spark-nightly nightly ${MODELS:+--onlyy $MODELS}", build_parser()
    )
