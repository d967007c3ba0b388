"""A built (Spark) night's records: its commits for the history, and main's ranges as suspects when no culprit
search ran (real git on a mirror that does not have the old commit: the range is named, its size unknown)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

import pytest

from pipeline import nightly
from pipeline.config.bundle import ConfigPaths, load_config
from pipeline.places import RunDir
from pipeline.progress import Progress
from pipeline.settings import from_environment
from pipeline.stages.aftermath.durations import Durations
from pipeline.stages.aftermath.suspects import record_last_good
from pipeline.stages.build.build_plan import BuildPlan
from pipeline.stages.prove.boot import Candidate
from pipeline.stages.prove.candidate import NightCandidate

pytestmark = pytest.mark.integration


def _settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, sub in (("PATHS_RUNS", "runs"), ("PATHS_STATE", "history"), ("PATHS_WHEELS", "wheels")):
        monkeypatch.setenv(f"SPARK_NIGHTLY_{key}", str(tmp_path / sub))
    monkeypatch.setenv("SPARK_NIGHTLY_PATHS_CACHE", str(tmp_path / "cache"))


def _plan(main_commit: str, commit: str) -> dict[str, object]:
    source = {
        "name": "vllm",
        "repo": "https://github.com/vllm-project/vllm.git",
        "ref": "main",
        "main_commit": main_commit,
        "main_date": "2026-11-21T00:00:00Z",
        "commit": commit,
        "tree": "f" * 40,
        "pull_requests": [
            {"number": 123, "head": "c" * 40, "current_head": "c" * 40, "pinned": False, "merge_base": main_commit,
             "status": "grafted", "reason": "", "kept_main_side": []},
            {"number": 456, "head": "d" * 40, "current_head": "d" * 40, "pinned": False, "merge_base": main_commit,
             "status": "dropped", "reason": "conflicts", "kept_main_side": []},
        ],
    }  # fmt: skip
    return {"version": 1, "created": "2026-11-21T01:00:00Z", "sources": [source]}


def test_a_built_night_records_its_commits_and_names_main_s_range_as_suspects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _settings(tmp_path, monkeypatch)
    settings = from_environment().settings
    root = Path(__file__).parents[2]
    config = load_config(ConfigPaths(root / "models.yaml", root / "thresholds", root / "golden"))
    profile = config.matrix.profiles["spark"]
    run_dir = tmp_path / "runs" / "20261122-010000"
    run_dir.mkdir(parents=True)
    good, tonight = _plan("a" * 40, "b" * 40), _plan("1" * 40, "2" * 40)
    (run_dir / "plan.json").write_text(json.dumps(tonight))
    plan = nightly.NightPlan("20261122-010000", "2026-11-22", RunDir(run_dir), profile, ())
    commits = nightly._commits(profile, BuildPlan.load(run_dir / "plan.json"))
    assert commits == {"vllm": "2" * 40, "vllm main": "1" * 40, "vllm PRs": "123"}
    (tmp_path / "good.json").write_text(json.dumps(good))
    record_last_good(settings.places.state.last_good, BuildPlan.load(tmp_path / "good.json"), "2026-11-21")
    candidate = NightCandidate(Candidate(profile, image="spark-nightly/runtime:x"), run_dir / "lock.txt", (), tonight)
    state = nightly.NightRun(settings, config, plan, cast(Progress, None), True, cast(Durations, None), candidate)
    suspects = nightly._suspects(state)
    assert suspects.startswith("since the last good night 2026-11-21: vllm main aaaaaaaaaaaa..111111111111")
    assert "https://github.com/vllm-project/vllm/compare/" + "a" * 40 + "..." + "1" * 40 in suspects
