"""The range a bisection walks, on real git: only first-parent commits that contain the last good one (a merge-shaped
history), and a force-pushed main (the last good commit no ancestor) said in one line, never bisected silently."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.infra.git import Git, mirror_dir
from pipeline.stages.aftermath.bisect_run import NotBisected, main_commits, moved_sources
from pipeline.stages.aftermath.suspects import GoodCommits
from pipeline.stages.build.build_plan import BuildPlan, SourcePlan
from tests.gitrepos import Upstream

pytestmark = pytest.mark.integration


def _plan(repo: Upstream, main: str) -> BuildPlan:
    source = SourcePlan("vllm", repo.url, "main", main, "2026-11-29T00:00:00Z", main, "", ())
    return BuildPlan("2026-11-29T01:00:00Z", (source,))


def test_a_good_commit_reached_only_through_a_merge_bisects_only_the_commits_that_contain_it(tmp_path: Path) -> None:
    """`git log --first-parent good..tip` lists main's commits before the merge too, which do not contain `good`:
    a step there would test a tree without the last good night's code."""
    repo = Upstream(tmp_path)
    one = repo.commit({"one": "1"}, "one (#1)")
    repo.checkout("side", one)
    good = repo.commit({"side-good": "1"}, "side good (#2)")
    repo.commit({"side-two": "1"}, "side two (#3)")
    repo.checkout("main")
    repo.commit({"three": "1"}, "three (#4)")
    repo.commit({"four": "1"}, "four (#5)")
    repo.git("merge", "--quiet", "--no-ff", "side", "-m", "merge side (#6)")
    merge = repo.git("rev-parse", "HEAD")
    five, six = repo.commit({"five": "1"}, "five (#7)"), repo.commit({"six": "1"}, "six (#8)")
    found = main_commits(Git(repo.work), good, six)
    assert len(found) == 3
    assert [c.sha for c in found] == [merge, five, six]


def test_a_straight_day_lists_every_first_parent_commit(tmp_path: Path) -> None:
    repo = Upstream(tmp_path)
    good = repo.commit({"good": "1"}, "good")
    day = [repo.commit({f"c{n}": "1"}, f"c{n}") for n in range(5)]
    assert [c.sha for c in main_commits(Git(repo.work), good, day[-1])] == day


def test_a_force_pushed_main_is_not_bisected_and_says_why(tmp_path: Path) -> None:
    repo = Upstream(tmp_path)
    repo.commit({"base": "1"}, "base")
    good = repo.commit({"good": "1"}, "good")
    repo.publish_main()
    repo.git("reset", "--quiet", "--hard", "HEAD~1")
    tip = repo.commit({"rewritten": "1"}, "rewritten")  # main force-pushed: the last good night's commit is gone
    repo.publish_main()
    cache = tmp_path / "cache"
    mirror = mirror_dir(cache, repo.url)
    repo.git("clone", "--quiet", "--mirror", str(repo.remote), str(mirror))
    Git(mirror)("fetch", "--quiet", str(repo.work), f"{good}:refs/kept/good")  # the mirror kept it from last night
    found = moved_sources(_plan(repo, tip), {"vllm": GoodCommits(repo.url, good, good)}, cache)
    assert found == NotBisected(
        f"vllm: the last good night's main {good[:12]} is no ancestor of tonight's {tip[:12]} (main was force-pushed)"
    )
    assert found.describe().startswith("not bisected: vllm: the last good night's main")
    unmoved = moved_sources(_plan(repo, tip), {"vllm": GoodCommits(repo.url, tip, tip)}, cache)
    assert unmoved == NotBisected(
        "no source's main moved since the last good night: tonight's failure is not main's history"
    )
