"""Bisecting main as git bisect does: the first bad commit within ceil(log2(N)) + 2 builds, a step that fails
otherwise than tonight or does not build skipped and stepped around, the good end tried when no step passed, a
range with the skipped commits named where it cannot narrow, and two moved sources separated first. Each messy day
of real histories (a boot-crash window, an unbuildable commit, every commit failing for the environment, both
sources moved) is a test here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import SimpleNamespace
from typing import cast

import pytest

from pipeline.config.matrix import ModelEntry
from pipeline.outcome import Failure, Outcome
from pipeline.stages.aftermath.bisect import Commit, MovedSource, StepResult, bisect_main, separate, step_bound
from pipeline.stages.aftermath.report import render_summary
from pipeline.stages.aftermath.trial_bench import Failing, cells_disagree, step_verdict, trial_verdict
from pipeline.status import Status

GOOD = Commit("0" * 40, "[Core] the last good night's main (#30000)", "2026-11-25T00:00:00Z")


def _day(count: int) -> list[Commit]:
    return [
        Commit(f"{n:040x}", f"[Core] change {n} (#{30000 + n})", f"2026-11-26T{n % 24:02d}:00:00Z")
        for n in range(1, count + 1)
    ]


def _oracle(first_bad: int, *, skipped: frozenset[int] = frozenset(), undecided: frozenset[int] = frozenset()):  # type: ignore[no-untyped-def]
    calls: list[int] = []

    def step(commit: Commit) -> StepResult:
        n = int(commit.sha, 16)
        calls.append(n)
        if n in skipped:
            return StepResult(Status.SKIPPED, "changes csrc/cpu/activation.cpp: no native build here", built=False)
        if n in undecided:
            return StepResult(Status.SKIPPED, "not tonight's failure: m: INCONCLUSIVE at health: the host was busy")
        return StepResult(Status.FAIL if n >= first_bad else Status.PASS, "ok", "vllm: overlay (20 s)", 95.0)

    return step, calls


@pytest.mark.parametrize("count", [1, 2, 3, 7, 16, 32, 33, 80])
def test_every_first_bad_commit_is_found_within_the_bound(count: int) -> None:
    commits = _day(count)
    for first_bad in range(1, count + 1):
        step, calls = _oracle(first_bad)
        found = bisect_main("vllm", GOOD, commits, step, max_steps=50)
        assert found.first_bad == commits[first_bad - 1], (count, first_bad)
        # no step passed where the first commit is the bad one: the good end is tried, one build more
        good_end = 1 if first_bad == 1 else 0
        assert found.builds <= step_bound(count) + good_end and len(calls) <= max(0, count - 1) + good_end
        assert (0 in calls) == bool(good_end)
        assert found.last_good == (GOOD.sha if first_bad == 1 else commits[first_bad - 2].sha)


def test_thirty_two_commits_take_at_most_seven_builds_and_name_the_pr() -> None:
    commits = _day(32)
    step, calls = _oracle(19)
    found = bisect_main("vllm", GOOD, commits, step, max_steps=7)
    assert len(calls) <= 7 and found.first_bad is not None and found.first_bad.pr == 30019
    assert found.describe() == (
        f"first bad commit of vllm main: {commits[18].sha[:12]} \u201c[Core] change 19 (#30019)\u201d (2026-11-26, PR "
        f"#30019) ({len(calls)} build(s) of at most 7 over 32 commits)"
    )
    data = found.to_json()
    assert data["first_bad_pr"] == 30019 and len(data["steps"]) == len(calls)  # type: ignore[arg-type]


def test_a_pr_number_is_read_from_a_squash_merge_and_from_githubs_merge_commit() -> None:
    def pr(subject: str) -> int | None:
        return Commit("a" * 40, subject, "2026-11-26T00:00:00Z").pr

    assert pr("[Core] Yield between steps (#32011)") == 32011
    assert pr("Merge pull request #33006 from dev/sampler") == 33006
    assert pr("Revert #12 in the docs") is None and pr("Merge branch 'main' into dev (#12 soon)") is None


def test_a_commit_that_cannot_be_built_is_stepped_around() -> None:
    commits = _day(16)
    step, calls = _oracle(12, skipped=frozenset({8}))  # 8 is the first middle: 9 is tried instead
    found = bisect_main("vllm", GOOD, commits, step, max_steps=10)
    assert found.first_bad == commits[11]
    assert calls[:2] == [8, 9] and found.builds == len(calls) - 1  # the skipped step built nothing


def test_a_skipped_commit_at_the_edge_leaves_the_range_naming_the_skipped_commits() -> None:
    commits = _day(16)
    step, _ = _oracle(8, skipped=frozenset({7}))  # 6 passes, 7 cannot be built, 8 fails: 7 or 8 broke it
    found = bisect_main("vllm", GOOD, commits, step, max_steps=10)
    assert found.first_bad is None and found.last_good == commits[5].sha
    assert found.candidates == (commits[6], commits[7])
    assert found.describe().startswith(
        f"vllm main broke at one of 2 commits: {commits[6].describe()}, {commits[7].describe()} (only skipped "
        f"commits were left to test ({commits[6].sha[:12]}: changes csrc/cpu/activation.cpp: no native build here)"
    )


def test_a_step_the_host_could_not_judge_is_skipped_once_never_retried() -> None:
    commits = _day(8)
    step, calls = _oracle(6, undecided=frozenset({4}))
    found = bisect_main("vllm", GOOD, commits, step, max_steps=10)
    assert calls.count(4) == 1 and found.first_bad == commits[5]


def test_the_bound_stops_the_search_with_its_range() -> None:
    commits = _day(64)
    step, calls = _oracle(40)
    found = bisect_main("vllm", GOOD, commits, step, max_steps=3)
    assert len(calls) == 3 and found.first_bad is None
    assert found.why == "the bound of 3 builds was reached"


def test_the_summary_names_the_first_bad_commit_and_shows_every_step() -> None:
    commits = _day(8)
    step, calls = _oracle(6, skipped=frozenset({4}))
    found = bisect_main("vllm", GOOD, commits, step, max_steps=10)
    run = {"night": "2026-11-27", "verdict": "FAIL", "run_id": "r", "profile": "cpu-built", "publish": ""}
    summary = render_summary(run | {"bisection": found.to_json()}, [])
    section = summary[summary.index("## Bisection of vllm main") :]
    sha = [c.sha[:12] for c in commits]
    assert section.startswith(
        f"## Bisection of vllm main\n\nfirst bad commit: {sha[5]} [Core] change 6 (#30006) (2026-11-26, PR #30006)"
    )
    assert f"| 1 | {sha[3]} [Core] change 4 (#30004) | - | 0 s | SKIPPED | changes csrc/cpu/activation.cpp" in section
    assert f"| 2 | {sha[4]} [Core] change 5 (#30005) | vllm: overlay (20 s) | 95 s | PASS | ok |" in section
    assert len(calls) == section.count("\n| ") - 2  # one row a step, below the header and its rule


def test_a_steps_detail_gives_a_perf_entrys_figures_and_only_a_golden_entrys_name() -> None:
    """The bisection table's detail: a perf entry that passes again says what its asked cell measured against
    tonight's A (the figure a failing step shows too); a golden entry's passing checks need no more than its name."""
    perf = Outcome(
        "m", Status.PASS, "perf", "4 cells within their references; tg32: 1.14x the last confirmed build", True, 1.0
    )
    golden = Outcome("g", Status.PASS, "golden", "every check passed", True, 1.0)
    status, detail = trial_verdict([perf, golden])
    assert status == Status.PASS
    assert detail == f"what failed tonight passes: m ({perf.reason}), g"
    failed = Outcome("m", Status.FAIL, "perf", "tg32: 0.47x the last confirmed build, one boot", True, 1.0)
    assert trial_verdict([failed, golden]) == (Status.FAIL, f"m: {failed.reason}")


# A day of main as real ones are, judged through step_verdict as CommitSteps judges a step: tonight the golden check
# "exact capital-of-france" of entry m failed.
ENTRY = cast(ModelEntry, SimpleNamespace(id="m"))  # a step's verdict reads only the entry's id
TONIGHT = [Failing(ENTRY, "golden", {}, frozenset({"m:golden exact capital-of-france"}))]
WRONG = Failure("m:golden", "exact", "answered 'Lyon'", subject="exact capital-of-france")


def _day_of_main(
    guilty: int,
    *,
    crash: frozenset[int] = frozenset(),
    unbuildable: frozenset[int] = frozenset(),
    fails_all: bool = False,
):  # type: ignore[no-untyped-def]
    """Each commit's step as CommitSteps returns it: a boot crash, a build failure, tonight's golden failure or a
    pass, judged by step_verdict against TONIGHT."""
    calls: list[int] = []

    def step(commit: Commit) -> StepResult:
        n = int(commit.sha, 16)
        calls.append(n)
        if n in unbuildable:
            return StepResult(
                Status.SKIPPED, "does not build here: ProcessError: csrc/ops.cpp:12: error", "build failed"
            )
        if n in crash:
            outcome = Outcome("m", Status.FAIL, "boot", "the server died while booting: ImportError", True, 1.0)
        elif n >= guilty or fails_all:
            outcome = Outcome("m", Status.FAIL, "golden", "1 golden check failed", True, 1.0, failures=(WRONG,))
        else:
            outcome = Outcome("m", Status.PASS, "golden", "every check passed", True, 1.0)
        return StepResult(*step_verdict(TONIGHT, [outcome]), "vllm: overlay (20 s)", 95.0)

    return step, calls


def test_a_boot_crash_window_before_the_guilty_commit_is_skipped_and_the_guilty_one_named() -> None:
    """Commits 14-17 of 32 crash at boot (main broken for an afternoon, fixed later); the culprit is 25. The search
    once tried 16, 8, 12, 14, 13 and named 14: a boot crash counted as tonight's golden failure."""
    commits = _day(32)
    step, calls = _day_of_main(25, crash=frozenset(range(14, 18)))
    found = bisect_main("vllm", GOOD, commits, step, max_steps=10)
    assert found.first_bad == commits[24], found.describe()
    crashed = [s for s in found.steps if s.result.status == Status.SKIPPED]
    assert len(crashed) == len([n for n in calls if n in range(14, 18)])
    assert all("not tonight's failure: m: FAIL at boot" in s.result.detail for s in crashed)


def test_a_boot_crash_window_that_hides_the_boundary_is_a_range_naming_it() -> None:
    commits = _day(32)
    step, _ = _day_of_main(15, crash=frozenset(range(14, 18)))  # the guilty commit is inside the window
    found = bisect_main("vllm", GOOD, commits, step, max_steps=12)
    assert found.first_bad is None
    assert [c.sha for c in found.candidates] == [commits[n - 1].sha for n in range(14, 19)]


def test_a_commit_that_fails_to_build_is_skipped_not_retried_and_the_search_goes_on() -> None:
    """A compile error was INCONCLUSIVE, built once more (20-40 minutes on a Spark), then the search stopped."""
    commits = _day(16)
    step, calls = _day_of_main(12, unbuildable=frozenset({8}))
    found = bisect_main("vllm", GOOD, commits, step, max_steps=10)
    assert found.first_bad == commits[11]
    assert calls.count(8) == 1


def test_every_commit_failing_tries_the_good_end_and_says_it_is_not_mains_history() -> None:
    """The companion re-resolved with newer dependencies: every step fails, and so does the last good commit."""
    commits = _day(16)
    step, calls = _day_of_main(99, fails_all=True)
    found = bisect_main("vllm", GOOD, commits, step, max_steps=10)
    assert calls[-1] == 0 and found.first_bad is None and found.good_fails
    assert found.describe().startswith(
        f"not vllm main's history: the last good commit {GOOD.sha[:12]} fails tonight too (m: 1 golden check failed)"
    )
    first_fails, _ = _day_of_main(1)  # the first commit is guilty: the good end passes, and the first is named
    assert bisect_main("vllm", GOOD, commits, first_fails, max_steps=10).first_bad == commits[0]


def test_a_good_end_that_passed_tonight_already_is_not_tried_again() -> None:
    commits = _day(8)
    step, calls = _day_of_main(1)
    found = bisect_main("vllm", GOOD, commits, step, max_steps=10, good_tested=True)
    assert 0 not in calls and found.first_bad == commits[0]


def _pair(guilty: Mapping[str, str], *, unjudged: frozenset[str] = frozenset()):  # type: ignore[no-untyped-def]
    """Trials of two sources' commits: bad where any source is at or past its guilty commit (by name order)."""
    tried: list[dict[str, str]] = []

    def trial(commits: Mapping[str, str]) -> StepResult:
        tried.append(dict(commits))
        if any(name in unjudged and sha != "0" * 40 for name, sha in commits.items()):
            return StepResult(Status.SKIPPED, "does not build here")
        bad = any(sha >= guilty[name] for name, sha in commits.items() if name in guilty)
        return StepResult(Status.FAIL if bad else Status.PASS, "m: 1 golden check failed" if bad else "passes")

    return trial, tried


VLLM = MovedSource("vllm", "0" * 40, f"{16:040x}")
FLASHINFER = MovedSource("flashinfer", "0" * 40, f"{9:040x}")


def test_two_moved_sources_a_guilty_flashinfer_commit_is_bisected_with_vllm_held_at_tonights() -> None:
    """Both sources moved (the Spark's usual night): tonight's vLLM with the last good FlashInfer passes, so
    FlashInfer's change is guilty, bisected with vLLM held at tonight's (that trial its good end)."""
    trial, tried = _pair({"flashinfer": f"{6:040x}"})
    chosen = separate(VLLM, FLASHINFER, trial)
    assert tried == [{"vllm": VLLM.tonight, "flashinfer": FLASHINFER.good}]
    assert chosen.bisect == FLASHINFER and chosen.held == {"vllm": VLLM.tonight} and chosen.good_tested
    commits = _day(9)
    found = bisect_main(
        "flashinfer", GOOD, commits, lambda c: trial({**chosen.held, "flashinfer": c.sha}), max_steps=6,
        good_tested=chosen.good_tested,
    )  # fmt: skip
    assert found.first_bad == commits[5]
    assert chosen.trials[0].startswith(f"vllm {VLLM.tonight[:12]} (tonight) with flashinfer {'0' * 12} (last good)")


def test_two_moved_sources_a_guilty_vllm_commit_is_bisected_with_flashinfer_held_at_its_last_good() -> None:
    trial, _ = _pair({"vllm": f"{11:040x}"})
    chosen = separate(VLLM, FLASHINFER, trial)
    assert chosen.bisect == VLLM and chosen.held == {"flashinfer": FLASHINFER.good} and not chosen.good_tested


def test_two_moved_sources_the_reverse_trial_decides_where_the_first_cannot_be_judged() -> None:
    trial, tried = _pair({"flashinfer": f"{6:040x}"}, unjudged=frozenset({"vllm"}))
    chosen = separate(VLLM, FLASHINFER, trial)
    assert len(tried) == 2 and tried[1] == {"flashinfer": FLASHINFER.tonight, "vllm": VLLM.good}
    assert chosen.bisect == FLASHINFER and chosen.held == {"vllm": VLLM.good}
    neither, _ = _pair({"flashinfer": f"{6:040x}"}, unjudged=frozenset({"vllm", "flashinfer"}))
    assert separate(VLLM, FLASHINFER, neither).bisect is None


def test_a_step_is_bad_only_when_it_fails_as_tonight_failed() -> None:
    golden = Outcome("m", Status.FAIL, "golden", "1 golden check failed", True, 1.0, failures=(WRONG,))
    more = replace(golden, failures=(WRONG, Failure("m:golden", "drift", "x", subject="drift water")))
    other = replace(golden, failures=(Failure("m:golden", "drift", "x", subject="drift water"),))
    assert step_verdict(TONIGHT, [golden])[0] == Status.FAIL
    assert step_verdict(TONIGHT, [more])[0] == Status.FAIL  # a strict superset of tonight's checks
    assert step_verdict(TONIGHT, [other]) == (
        Status.SKIPPED,
        "not tonight's failure: m: fails other checks at golden: 1 golden check failed",
    )
    host = Outcome("m", Status.INCONCLUSIVE, "smoke", "this host cannot run the candidate: x", True, 1.0)
    assert step_verdict(TONIGHT, [host]) == (
        Status.SKIPPED,
        "not tonight's failure: m: INCONCLUSIVE at smoke: this host cannot run the candidate: x",
    )
    passed = Outcome("m", Status.PASS, "golden", "every check passed", True, 1.0)
    assert step_verdict(TONIGHT, [passed]) == (Status.PASS, "what failed tonight passes: m")


def _perf_step(**cells: Status) -> Outcome:
    """A step's perf outcome whose cells ended as given, each decided on one boot of it where it was decided, those
    that FAILed named as the perf verdict names them."""
    failures = tuple(
        Failure("m:perf", f"{cell} t/s", "slower", subject=cell)
        for cell, status in cells.items()
        if status == Status.FAIL
    )
    numbers = {
        "cells": {
            cell: {"status": status.value, "step_boots": 0 if status == Status.INCONCLUSIVE else 1}
            for cell, status in cells.items()
        }
    }
    status = Status.FAIL if failures else Status.INCONCLUSIVE
    if all(cell == Status.PASS for cell in cells.values()):
        status = Status.PASS
    return Outcome("m", status, "perf", "tg32: 0.52x the last confirmed build", True, 1.0, numbers, failures=failures)


def test_a_step_that_fails_one_of_tonights_cells_and_leaves_the_other_undecided_carries_tonights_slowdown() -> None:
    """The slower day on a fast host: tonight FAILed pp128 (0.81x) and tg32 (0.50x); the guilty commit's pairs settled
    tg32 at 0.52x but not pp128, within a step's spread. That step is bad. The days that would fool the rule stay
    skipped: a step that passes one of tonight's cells while it fails the other (two regressions on one day, this one
    carrying only one), one whose every cell is undecided, and one that fails only a cell tonight did not fail."""
    tonight = [Failing(ENTRY, "perf", {"pp128": 0.81, "tg32": 0.5}, frozenset({"m:perf pp128", "m:perf tg32"}))]
    assert step_verdict(tonight, [_perf_step(pp128=Status.INCONCLUSIVE, tg32=Status.FAIL)])[0] == Status.FAIL
    assert step_verdict(tonight, [_perf_step(pp128=Status.FAIL, tg32=Status.FAIL)])[0] == Status.FAIL
    for other in (
        _perf_step(pp128=Status.PASS, tg32=Status.FAIL),
        _perf_step(pp128=Status.INCONCLUSIVE, tg32=Status.INCONCLUSIVE),
        _perf_step(pp128=Status.INCONCLUSIVE, tg32=Status.INCONCLUSIVE, pp512=Status.FAIL),
    ):
        assert step_verdict(tonight, [other])[0] == Status.SKIPPED, other


def test_a_step_that_passes_one_of_tonights_cells_and_leaves_the_other_undecided_does_not_carry_the_slowdown() -> None:
    """The mirror, and the landing run's day of 2026-12-02 (tonight pp128 at 0.75x, tg32 at 0.49x, on a host whose
    boots spread about 10 %): a good step's second look settled tg32 like the last confirmed build and left pp128,
    the narrow gap, between the two builds; skipped, it left the guilty commit one of two. It is good, as its mirror
    is bad, and says which cell answered. A cell of tonight's that it FAILs, every cell undecided, a cell not
    measured, or tonight's failure beyond its perf cells keep it skipped."""
    tonight = [Failing(ENTRY, "perf", {"pp128": 0.75, "tg32": 0.49}, frozenset({"m:perf pp128", "m:perf tg32"}))]
    status, detail = step_verdict(tonight, [_perf_step(pp128=Status.INCONCLUSIVE, tg32=Status.PASS)])
    assert status == Status.PASS, detail
    assert detail.endswith("passes tg32 of tonight's cells, leaves pp128 undecided)"), detail
    assert step_verdict(tonight, [_perf_step(pp128=Status.PASS, tg32=Status.PASS)])[0] == Status.PASS
    for other in (
        _perf_step(pp128=Status.PASS, tg32=Status.FAIL),
        _perf_step(pp128=Status.INCONCLUSIVE, tg32=Status.INCONCLUSIVE),
        _perf_step(tg32=Status.PASS, pp512=Status.INCONCLUSIVE),  # pp128 not measured
        _perf_step(pp128=Status.INCONCLUSIVE, tg32=Status.PASS, pp512=Status.FAIL),
    ):
        assert step_verdict(tonight, [other])[0] == Status.SKIPPED, other
    beyond = [replace(tonight[0], failures=tonight[0].failures | {"m:perf golden-gate"})]
    assert step_verdict(beyond, [_perf_step(pp128=Status.INCONCLUSIVE, tg32=Status.PASS)])[0] == Status.SKIPPED


def test_cells_answered_both_ways_on_the_steps_boots_are_a_split_step_and_nothing_else_is() -> None:
    tonight = [Failing(ENTRY, "perf", {"pp128": 0.75, "tg32": 0.49}, frozenset({"m:perf pp128", "m:perf tg32"}))]
    split = _perf_step(pp128=Status.FAIL, tg32=Status.PASS)
    assert cells_disagree(tonight, [split])
    assert step_verdict(tonight, [split]) == (
        Status.SKIPPED,
        "not tonight's failure: m: its boots answered tonight's cells both ways at perf: " + split.reason,
    )
    for agreeing in (
        _perf_step(pp128=Status.FAIL, tg32=Status.FAIL),
        _perf_step(pp128=Status.INCONCLUSIVE, tg32=Status.PASS),
        _perf_step(pp128=Status.PASS, tg32=Status.PASS, pp512=Status.FAIL),  # pp512 is not tonight's
    ):
        assert not cells_disagree(tonight, [agreeing]), agreeing
    by_pairs = _perf_step(pp128=Status.FAIL, tg32=Status.PASS)  # decided by pairs, not by its boots: not a split
    cells = {name: {**cell, "step_boots": 0} for name, cell in by_pairs.numbers["cells"].items()}
    assert not cells_disagree(tonight, [replace(by_pairs, numbers={"cells": cells})])


# One-boot perf steps, and the day that fooled them: the GPU day of 2026-11-29 (10 commits, the 7th sleeping in each
# engine step) stepped on the 5th (PASS, 0.96x), the 7th (FAIL, 0.63x) and the 6th, a good commit whose one boot
# measured 0.66x with every cell of that boot slow, and named the 6th. Each step here is decided on `boots` boots, as
# the perf stage reports it (StepResult.weighed_boots); `lies` are the first looks that one boot got wrong.


def _one_boot_day(guilty: int, *, lies: Mapping[int, Status], again: Mapping[int, Status] | None = None):  # type: ignore[no-untyped-def]
    looks: list[tuple[int, int]] = []  # (commit, boots) in the order tried

    def answer(n: int, boots: int) -> StepResult:
        looks.append((n, boots))
        truth = Status.FAIL if n >= guilty else Status.PASS
        status = lies.get(n, truth) if boots == 1 else (again or {}).get(n, truth)
        return StepResult(status, f"tg32 (c4) on {boots} boot(s)", "vllm: overlay (17 s)", 200.0, weighed_boots=boots)

    def first(commit: Commit) -> StepResult:
        return answer(int(commit.sha, 16), 1)

    def confirm(commit: Commit) -> StepResult:
        return answer(int(commit.sha, 16), 2)

    return first, confirm, looks


def test_the_gpu_days_lying_boot_is_tried_again_and_the_guilty_commit_named() -> None:
    commits = _day(10)
    first, confirm, looks = _one_boot_day(7, lies={6: Status.FAIL})
    fooled = bisect_main("vllm", GOOD, commits, first, max_steps=8)
    assert fooled.first_bad == commits[5]  # without a second look: the 6th, as on the GPU
    looks.clear()
    found = bisect_main("vllm", GOOD, commits, first, max_steps=8, confirm=confirm)
    assert found.first_bad == commits[6], found.describe()
    # the 6th FAILed on one boot and PASSed on two; the 7th is then the boundary's bad side, tried again and still bad;
    # the 5th PASSed on one boot and was the boundary's good side until the 6th turned over
    assert looks == [(5, 1), (7, 1), (6, 1), (5, 2), (6, 2), (7, 2)]
    assert [s.again for s in found.steps] == [False, False, False, True, True, True]
    assert found.builds == 3 and found.confirmations == 3
    assert found.why == "3 build(s) of at most 8 over 10 commits, 3 tried again on 2 boots"
    assert [s["again"] for s in found.to_json()["steps"]] == [False, False, False, True, True, True]  # type: ignore[index, union-attr]
    run = {"night": "2026-11-29", "verdict": "FAIL", "run_id": "r", "profile": "gpu-built", "publish": ""}
    table = render_summary(run | {"bisection": found.to_json()}, [])
    sixth = f"| 5 | {commits[5].sha[:12]} [Core] change 6 (#30006) | vllm: overlay (17 s) | 200 s | PASS, second look |"
    assert sixth in table and table.count(", second look |") == 3, table  # the summary tells the second looks apart


def test_a_boundary_decided_on_two_boots_or_by_golden_is_not_tried_again() -> None:
    commits = _day(10)
    two, confirm, looks = _one_boot_day(7, lies={})
    decided_on_two = bisect_main(
        "vllm", GOOD, commits, lambda c: replace(two(c), weighed_boots=2), max_steps=8, confirm=confirm
    )
    assert decided_on_two.first_bad == commits[6] and decided_on_two.confirmations == 0
    golden, _ = _oracle(7)  # golden's answers weigh no boots (weighed_boots 0): deterministic, never tried again
    assert bisect_main("vllm", GOOD, commits, golden, max_steps=8, confirm=confirm).confirmations == 0
    assert all(boots == 1 for _, boots in looks) and len(looks) == 3


def test_a_wrong_pass_at_the_boundary_turns_over_and_the_search_goes_on() -> None:
    commits = _day(10)
    first, confirm, _ = _one_boot_day(7, lies={7: Status.PASS})  # the guilty commit's one boot looked good
    found = bisect_main("vllm", GOOD, commits, first, max_steps=8, confirm=confirm)
    assert found.first_bad == commits[6], found.describe()


def test_a_boundary_step_undecided_on_its_second_look_is_skipped_and_said() -> None:
    commits = _day(10)
    first, confirm, _ = _one_boot_day(7, lies={6: Status.FAIL}, again={6: Status.INCONCLUSIVE})
    found = bisect_main("vllm", GOOD, commits, first, max_steps=8, confirm=confirm)
    assert found.first_bad is None and [c.sha for c in found.candidates] == [commits[5].sha, commits[6].sha]
    assert "only skipped commits were left to test" in found.why and "on 2 boot(s)" in found.why


def test_a_step_whose_boots_answered_its_cells_both_ways_is_looked_at_again_at_once_not_built_around() -> None:
    """The 6th of 10 (good) split on its first boot (tg32 like A, pp128 like tonight's build: a slow boot reads the
    narrow gap wrong first): skipped, the search would build the 5th and the 7th around it and end on a range;
    looked at again at once it PASSes and the 7th is named, with no build more. A split that stays split is
    skipped as before."""
    commits = _day(10)
    first, confirm, looks = _one_boot_day(7, lies={6: Status.SKIPPED})

    def splitting(commit: Commit) -> StepResult:
        result = first(commit)
        return replace(result, split=True) if int(commit.sha, 16) == 6 else result

    found = bisect_main("vllm", GOOD, commits, splitting, max_steps=8, confirm=confirm)
    assert found.first_bad == commits[6], found.describe()
    assert looks[:3] == [(5, 1), (7, 1), (6, 1)] and looks[3] == (6, 2), looks  # at once, before any other look
    assert found.builds == 3 and [s.again for s in found.steps][:4] == [False, False, False, True]
    _, still, _ = _one_boot_day(7, lies={6: Status.SKIPPED}, again={6: Status.SKIPPED})
    stays = bisect_main("vllm", GOOD, commits, splitting, max_steps=8, confirm=still)
    assert stays.first_bad is None and commits[5] in stays.candidates and commits[6] in stays.candidates
    assert sum(1 for s in stays.steps if s.again and s.commit == commits[5]) == 1  # looked at again once, not twice
    unconfirmed = bisect_main("vllm", GOOD, commits, splitting, max_steps=8)  # no second look at hand: skipped
    assert unconfirmed.steps and not any(s.again for s in unconfirmed.steps) and unconfirmed.first_bad is None


def test_a_good_end_failing_on_one_boot_is_tried_again_before_it_is_called_not_mains_history() -> None:
    commits = _day(4)
    first, confirm, looks = _one_boot_day(1, lies={0: Status.FAIL})  # the good end's one boot lied; on two it passes
    found = bisect_main("vllm", GOOD, commits, first, max_steps=8, confirm=confirm)
    assert not found.good_fails and found.first_bad == commits[0] and looks[-2:] == [(0, 1), (0, 2)]
