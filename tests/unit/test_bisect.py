"""Bisecting main: the first bad commit within ceil(log2(N)) + 2 builds, skipped commits stepped around, an
undecidable step measured once more, a range where it cannot narrow."""

from __future__ import annotations

import pytest

from pipeline.outcome import Outcome
from pipeline.stages.aftermath.bisect import Commit, StepResult, bisect_main, step_bound
from pipeline.stages.aftermath.report import render_summary
from pipeline.stages.aftermath.trial_bench import trial_verdict
from pipeline.status import Status

GOOD = "0" * 40


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
            return StepResult(Status.SKIPPED, "changes csrc/cpu/activation.cpp: no native build here")
        if n in undecided:
            return StepResult(Status.INCONCLUSIVE, "the host was busy")
        return StepResult(Status.FAIL if n >= first_bad else Status.PASS, "ok", "vllm: overlay (20 s)", 95.0)

    return step, calls


@pytest.mark.parametrize("count", [1, 2, 3, 7, 16, 32, 33, 80])
def test_every_first_bad_commit_is_found_within_the_bound(count: int) -> None:
    commits = _day(count)
    for first_bad in range(1, count + 1):
        step, calls = _oracle(first_bad)
        found = bisect_main("vllm", GOOD, commits, step, max_steps=50)
        assert found.first_bad == commits[first_bad - 1], (count, first_bad)
        assert len(calls) <= step_bound(count) and len(calls) <= max(0, count - 1)
        assert found.last_good == (GOOD if first_bad == 1 else commits[first_bad - 2].sha)


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


def test_a_commit_that_cannot_be_built_is_stepped_around() -> None:
    commits = _day(16)
    step, calls = _oracle(12, skipped=frozenset({8}))  # 8 is the first middle: 9 is tried instead
    found = bisect_main("vllm", GOOD, commits, step, max_steps=10)
    assert found.first_bad == commits[11]
    assert calls[:2] == [8, 9] and found.builds == len(calls) - 1  # the skipped step built nothing


def test_a_skipped_commit_at_the_edge_leaves_a_range_saying_why() -> None:
    commits = _day(16)
    step, _ = _oracle(8, skipped=frozenset({7}))  # 6 passes, 7 cannot be built, 8 fails: 7 or 8 broke it
    found = bisect_main("vllm", GOOD, commits, step, max_steps=10)
    assert found.first_bad is None and found.last_good == commits[5].sha
    assert found.describe() == (
        f"vllm main broke between {commits[5].sha[:12]}..{commits[7].sha[:12]}: every commit left in the range "
        f"was skipped: {commits[6].sha[:12]}: changes csrc/cpu/activation.cpp: no native build here"
    )


def test_an_undecided_step_is_measured_once_more_then_reported_as_the_edge() -> None:
    commits = _day(8)
    step, calls = _oracle(6, undecided=frozenset({4}))
    found = bisect_main("vllm", GOOD, commits, step, max_steps=10)
    assert calls[:2] == [4, 4] and found.first_bad is None
    assert found.why.endswith("could not be decided twice: the host was busy")


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
