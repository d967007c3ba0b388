"""The range a bisection walks, on real git: only first-parent commits that contain the last good one (a merge-shaped
history), and a force-pushed main (the last good commit no ancestor) said in one line, never bisected silently."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pipeline.infra.git import Git, mirror_dir
from pipeline.stages.aftermath.bisect_run import NotBisected, main_commits, moved_sources
from pipeline.stages.build.build_plan import BuildPlan, SourcePlan

pytestmark = pytest.mark.integration

REPO = "https://github.com/vllm-project/vllm.git"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def _commit(repo: Path, name: str) -> str:
    (repo / name).write_text(name)
    _git(repo, "add", name)
    _git(repo, "commit", "-q", "-m", f"{name} (#{abs(hash(name)) % 90000 + 10000})")
    return _git(repo, "rev-parse", "HEAD")


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "work"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "dev@example.com")
    _git(repo, "config", "user.name", "dev")
    return repo


def test_a_good_commit_reached_only_through_a_merge_bisects_only_the_commits_that_contain_it(repo: Path) -> None:
    """`git log --first-parent good..tip` lists main's commits before the merge too, which do not contain `good`:
    a step there would test a tree without the last good night's code."""
    _commit(repo, "one")
    _git(repo, "checkout", "-q", "-b", "side")
    good = _commit(repo, "side-good")
    _commit(repo, "side-two")
    _git(repo, "checkout", "-q", "main")
    _commit(repo, "three")
    _commit(repo, "four")
    _git(repo, "merge", "-q", "--no-ff", "side", "-m", "merge side (#20000)")
    merge = _git(repo, "rev-parse", "HEAD")
    five, six = _commit(repo, "five"), _commit(repo, "six")
    found = main_commits(Git(repo), good, six)
    assert len(found) == 3
    assert [c.sha for c in found] == [merge, five, six]


def test_a_straight_day_lists_every_first_parent_commit(repo: Path) -> None:
    good = _commit(repo, "good")
    day = [_commit(repo, f"c{n}") for n in range(5)]
    assert [c.sha for c in main_commits(Git(repo), good, day[-1])] == day


def _plan(main: str) -> BuildPlan:
    source = SourcePlan("vllm", REPO, "main", main, "2026-11-29T00:00:00Z", main, "", ())
    return BuildPlan("2026-11-29T01:00:00Z", (source,))


def test_a_force_pushed_main_is_not_bisected_and_says_why(repo: Path, tmp_path: Path) -> None:
    _commit(repo, "base")
    good = _commit(repo, "good")
    _git(repo, "reset", "-q", "--hard", "HEAD~1")
    tip = _commit(repo, "rewritten")  # main force-pushed: the last good night's commit is gone from it
    cache = tmp_path / "cache"
    subprocess.run(["git", "clone", "-q", "--mirror", str(repo), str(mirror_dir(cache, REPO))], check=True)
    _git(mirror_dir(cache, REPO), "fetch", "-q", str(repo), f"{good}:refs/kept/good")
    found = moved_sources(_plan(tip), {"vllm": {"main_commit": good}}, cache)
    assert found == NotBisected(
        f"vllm: the last good night's main {good[:12]} is no ancestor of tonight's {tip[:12]} (main was force-pushed)"
    )
    assert found.describe().startswith("not bisected: vllm: the last good night's main")
    unmoved = moved_sources(_plan(tip), {"vllm": {"main_commit": tip}}, cache)
    assert unmoved == NotBisected(
        "no source's main moved since the last good night: tonight's failure is not main's history"
    )
