"""The artifact stand-ins act runs keep the actions' documented rules, and the workflows name only commands and flags
the command line has."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.cli import build_parser
from tests.actions.artifacts import ActionFailed, download, upload
from tests.workflow_commands import cli_problems, workflow_problems

ROOT = Path(__file__).parents[2]


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def _workspace(tmp_path: Path) -> Path:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    return workspace


def test_an_artifact_name_is_taken_once_per_run_unless_overwritten(tmp_path: Path) -> None:
    workspace, store = _workspace(tmp_path), tmp_path / "artifacts"
    (workspace / "a.txt").write_text("1")
    upload({"name": "x", "path": "a.txt"}, workspace, store)
    with pytest.raises(ActionFailed, match=r"\(409\) Conflict"):
        upload({"name": "x", "path": "a.txt"}, workspace, store)
    upload({"name": "x", "path": "a.txt", "overwrite": "true"}, workspace, store)
    assert _files(store) == ["x/a.txt"]


def test_an_artifact_is_rooted_at_the_common_ancestor_of_its_paths_and_leaves_hidden_files_out(tmp_path: Path) -> None:
    workspace, store = _workspace(tmp_path), tmp_path / "artifacts"
    for name in ("runs/r1/night.json", "runs/r1/.hidden", "runs/r1/x/a.whl", "runs/r1/x/b.txt"):
        (workspace / name).parent.mkdir(parents=True, exist_ok=True)
        (workspace / name).write_text("x")
    # wheels/r1 matches nothing, yet counts for the root: the artifact keeps runs/ and wheels/ at its top
    upload({"name": "build", "path": "runs/r1\nwheels/r1\n!runs/r1/**/*.whl"}, workspace, store)
    assert _files(store / "build") == ["runs/r1/night.json", "runs/r1/x/b.txt"]
    upload({"name": "one", "path": "runs/r1/x"}, workspace, store)  # one folder: its contents at the top
    assert _files(store / "one") == ["a.whl", "b.txt"]
    with pytest.raises(ActionFailed, match="No files were found"):
        upload({"name": "none", "path": "nothing/here", "if-no-files-found": "error"}, workspace, store)


def test_a_pattern_download_puts_each_artifact_in_its_own_folder_unless_merged(tmp_path: Path) -> None:
    workspace, store = _workspace(tmp_path), tmp_path / "artifacts"
    for shard in ("shard-0", "shard-1", "other"):
        (store / shard / "entries").mkdir(parents=True)
        (store / shard / "entries" / f"{shard}.json").write_text("{}")
    download({"pattern": "shard-*", "path": "apart"}, workspace, store)
    assert _files(workspace / "apart") == ["shard-0/entries/shard-0.json", "shard-1/entries/shard-1.json"]
    download({"pattern": "shard-*", "path": "merged", "merge-multiple": "true"}, workspace, store)
    assert _files(workspace / "merged") == ["entries/shard-0.json", "entries/shard-1.json"]
    with pytest.raises(ActionFailed, match="Artifact not found"):
        download({"name": "build-missing"}, workspace, store)


def test_the_committed_workflows_name_only_commands_and_flags_the_cli_has() -> None:
    parser = build_parser()
    workflows = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
    assert [w.name for w in workflows] == ["ci.yml", "nightly.yml"]
    for workflow in workflows:
        assert workflow_problems(workflow.read_text(), parser) == [], workflow
    nightly = (ROOT / ".github" / "workflows" / "nightly.yml").read_text()
    assert "--merge --actions" in nightly
    broken = nightly.replace("--merge --actions", "--merge --actoins")
    assert workflow_problems(broken, parser) == ["`spark-nightly nightly` has no flag --actoins"]
    assert cli_problems('.venv/bin/spark-nightly nightlies --run-id "$R"', parser) == [
        "`spark-nightly nightlies`: no such command"
    ]
    assert cli_problems(
        "x=1 ${MODELS:+--onlyy $MODELS}; .venv/bin/spark-nightly nightly ${MODELS:+--onlyy $MODELS}", parser
    )
