"""Resolve on real git repositories: PRs grafted, skipped and dropped as a careful maintainer would."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.infra.git import Git, mirror_dir
from pipeline.stages.build.build_plan import BuildPlan, SourcePlan
from pipeline.stages.build.builders.base import BuildSource
from pipeline.stages.build.resolve import Source, resolve_sources
from tests.gitrepos import Upstream

pytestmark = pytest.mark.integration

CREATED = "2026-11-21T02:00:00Z"
CODE = "def answer():\n    return 41\n\n\ndef other():\n    return 1\n"
GUIDE = "# Guide\n\nInstall it.\n"


@pytest.fixture()
def upstream(tmp_path: Path) -> Upstream:
    repo = Upstream(tmp_path)
    repo.commit({"src/core.py": CODE, "docs/guide.md": GUIDE, "tests/test_core.py": "x = 1\n"}, "base")
    repo.publish_main()
    return repo


def _resolve(upstream: Upstream, tmp_path: Path, prs: tuple[str, ...], said: list[str] | None = None) -> SourcePlan:
    source = Source("vllm", upstream.url, "main", prs, "sources.vllm.prs")
    work = tmp_path / "run"
    work.mkdir(exist_ok=True)
    say = said.append if said is not None else (lambda line: None)
    plan = resolve_sources([source], cache_dir=tmp_path / "cache", work_dir=work, created=CREATED, say=say)
    plan.save(work / "plan.json")
    assert BuildPlan.load(work / "plan.json") == plan  # the JSON holds everything
    return plan.source("vllm")


def _mirror(upstream: Upstream, tmp_path: Path) -> Git:
    return Git(mirror_dir(tmp_path / "cache", upstream.url))


def _pr(upstream: Upstream, number: int, files: dict[str, str | None], start: str = "main") -> str:
    upstream.checkout(f"pr{number}", start)
    upstream.commit(files, f"PR {number}")
    head = upstream.publish_pull(number, f"pr{number}")
    upstream.checkout("main")
    return head


def test_clean_merged_conflicting_and_pinned_prs_each_end_as_a_maintainer_would(
    upstream: Upstream, tmp_path: Path
) -> None:
    base = upstream.git("rev-parse", "main")
    clean = _pr(upstream, 1, {"src/feature.py": "FEATURE = True\n"})
    merged = _pr(upstream, 2, {"src/fix.py": "FIXED = True\n"})
    docs = _pr(upstream, 3, {"docs/guide.md": "# Guide\n\nInstall it with pip.\n", "src/speed.py": "FAST = True\n"})
    code = _pr(upstream, 4, {"src/core.py": CODE.replace("41", "42")})
    old_head = _pr(upstream, 5, {"src/five.py": "V = 1\n"})
    upstream.checkout("pr5")
    new_head = upstream.commit({"src/five.py": "V = 2\n"}, "PR 5, second push")
    upstream.publish_pull(5, "pr5")
    upstream.checkout("main")
    # main moves on: merges PR 2, and changes the lines PRs 3 and 4 also change
    upstream.git("merge", "--quiet", "--no-ff", "-m", "Merge #2", "pr2")
    upstream.commit({"docs/guide.md": "# Guide\n\nInstall it with uv.\n"}, "docs on main")
    main = upstream.commit({"src/core.py": CODE.replace("41", "40")}, "code on main")
    upstream.publish_main()

    plan = _resolve(upstream, tmp_path, ("1", "#2", "3", "https://github.com/o/upstream/pull/4", f"5@{old_head}"))

    assert plan.main_commit == main
    statuses = {pr.number: (pr.status, pr.reason) for pr in plan.pull_requests}
    assert statuses[1][0] == "grafted"
    assert statuses[2] == ("skipped", f"head {merged[:12]} is already contained in main")
    assert statuses[3][0] == "grafted" and "kept main's side: docs/guide.md" in statuses[3][1]
    assert statuses[4] == ("dropped", "conflicts in code: src/core.py")
    assert statuses[5][0] == "grafted" and f"the PR's head is now {new_head[:12]}" in statuses[5][1]
    by_number = {pr.number: pr for pr in plan.pull_requests}
    assert by_number[1].head == clean and by_number[1].merge_base == base
    assert by_number[3].head == docs and by_number[3].kept_main_side == ("docs/guide.md",)
    assert by_number[4].head == code
    assert (by_number[5].head, by_number[5].current_head, by_number[5].pinned) == (old_head, new_head, True)
    assert plan.grafted == (1, 3, 5)

    mirror = _mirror(upstream, tmp_path)
    built = plan.commit
    assert mirror.is_ancestor(main, built)
    assert mirror("show", f"{built}:src/feature.py") == "FEATURE = True"
    assert mirror("show", f"{built}:src/speed.py") == "FAST = True"  # PR 3's code came with it
    assert mirror("show", f"{built}:docs/guide.md").endswith("Install it with uv.")  # main's side kept
    assert "return 40" in mirror("show", f"{built}:src/core.py")  # PR 4 left out entirely
    assert mirror("show", f"{built}:src/five.py") == "V = 1"  # the pinned head, not the newer push
    assert plan.tree == mirror("rev-parse", f"{built}^{{tree}}")


def test_a_second_night_with_nothing_new_fetches_nothing_and_pins_the_same_commits(
    upstream: Upstream, tmp_path: Path
) -> None:
    _pr(upstream, 7, {"src/seven.py": "S = 7\n"})
    first = _resolve(upstream, tmp_path, ("7",))
    objects = _mirror(upstream, tmp_path).object_count()
    said: list[str] = []
    second = _resolve(upstream, tmp_path, ("7",), said)
    assert second == first  # grafts are reproducible: same inputs, same commit SHAs
    assert _mirror(upstream, tmp_path).object_count() == objects
    assert any("the fetch added 0 objects" in line for line in said), said

    upstream.commit({"src/core.py": CODE + "\n# new\n"}, "main moves")
    upstream.publish_main()
    said.clear()
    third = _resolve(upstream, tmp_path, ("7",), said)
    assert third.main_commit != first.main_commit and third.commit != first.commit
    # only what is new crosses: main's commit, its root tree, the src/ tree and the changed blob
    assert any("the fetch added 4 objects" in line for line in said), said


def test_a_missing_pr_or_unfetchable_pin_is_dropped_and_the_others_still_graft(
    upstream: Upstream, tmp_path: Path
) -> None:
    _pr(upstream, 8, {"src/eight.py": "E = 8\n"})
    plan = _resolve(upstream, tmp_path, ("8", "999", f"8@{'0' * 40}"))
    reasons = [(pr.number, pr.status, pr.reason) for pr in plan.pull_requests]
    assert reasons[0][:2] == (8, "grafted")
    assert reasons[1] == (999, "dropped", "the repository has no such pull request")
    assert reasons[2] == (8, "dropped", f"pinned head {'0' * 12} cannot be fetched")


def test_a_squash_merged_pr_is_skipped_because_its_diff_is_already_in_main(upstream: Upstream, tmp_path: Path) -> None:
    _pr(upstream, 9, {"src/nine.py": "N = 9\n"})
    upstream.commit({"src/nine.py": "N = 9\n"}, "Squashed #9")
    upstream.publish_main()
    plan = _resolve(upstream, tmp_path, ("9",))
    assert [(pr.status, pr.reason) for pr in plan.pull_requests] == [
        ("skipped", "its changes are already in main (empty diff after the merge)")
    ]
    assert plan.commit == plan.main_commit


def test_the_build_checks_out_exactly_the_planned_commit_with_a_version_label_of_commit_and_date(
    upstream: Upstream, tmp_path: Path
) -> None:
    _pr(upstream, 11, {"src/eleven.py": "E = 11\n"})
    plan = _resolve(upstream, tmp_path, ("11",))
    source = BuildSource.from_plan(plan, mirror_dir(tmp_path / "cache", upstream.url))
    assert source.version_label == f"g{plan.commit[:9]}.d20261101"  # the upstream commit's date, not tonight's
    assert source.identity == f"git-tree:{plan.tree}"
    root = source.materialize(tmp_path / "src")
    assert (root / "src" / "eleven.py").read_text() == "E = 11\n"
    assert Git(root)("rev-parse", "HEAD") == plan.commit
    source.release(tmp_path / "src")
    assert not (tmp_path / "src").exists()
