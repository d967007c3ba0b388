"""The culprit search finds every breaking PR within its bound, and says so honestly when it cannot."""

from __future__ import annotations

import itertools
import math

import pytest

from pipeline.stages.aftermath.culprit import PullRef, TrialResult, find_culprits
from pipeline.stages.aftermath.culprit_run import describe_search
from pipeline.stages.aftermath.report import render_summary
from pipeline.stages.aftermath.suspects import CommitRange, compare_url, pull_url
from pipeline.stages.build.build_plan import BuildPlan, SourcePlan
from pipeline.status import Status


def _prs(count: int) -> list[PullRef]:
    return [PullRef("vllm" if n % 2 else "flashinfer", 100 + n) for n in range(count)]


def _oracle(bad: set[PullRef], calls: list[tuple[PullRef, ...]]):  # type: ignore[no-untyped-def]
    def trial(subset: tuple[PullRef, ...]) -> TrialResult:
        calls.append(subset)
        broken = bad & set(subset)
        return TrialResult(
            Status.FAIL if broken else Status.PASS, f"broken by {sorted(map(str, broken))}" if broken else "ok"
        )

    return trial


@pytest.mark.parametrize("count", range(1, 9))
def test_every_set_of_up_to_two_culprits_is_found_with_its_passing_remainder(count: int) -> None:
    prs = _prs(count)
    for size in (1, 2):
        for bad in itertools.combinations(prs, size):
            calls: list[tuple[PullRef, ...]] = []
            search = find_culprits(prs, _oracle(set(bad), calls), max_builds=40)
            assert search.conclusion == "culprits", (bad, search.why)
            assert sorted(pr for pr, _ in search.culprits) == sorted(bad)
            assert search.passing == tuple(pr for pr in prs if pr not in bad)
            assert search.passing in calls  # what may be published was itself a passing trial
            assert len(calls) == len(search.trials) == len(set(calls))  # no subset is built twice
            # one culprit: main, about log2(n) halvings, one check of the rest
            bound = 1 + size * (math.ceil(math.log2(count)) + 1)
            assert len(calls) <= bound, (bad, calls)


def test_main_alone_failing_blames_no_pr_after_one_build() -> None:
    calls: list[tuple[PullRef, ...]] = []
    search = find_culprits(
        _prs(4), lambda subset: (calls.append(subset), TrialResult(Status.FAIL, "x"))[1], max_builds=6
    )
    assert search.conclusion == "main-fails" and search.culprits == [] and calls == [()]
    assert search.passing is None


def test_the_bound_on_extra_builds_stops_the_search_and_says_what_is_left() -> None:
    prs = _prs(8)
    calls: list[tuple[PullRef, ...]] = []
    search = find_culprits(prs, _oracle({prs[5]}, calls), max_builds=2)
    assert len(calls) == 2 and search.conclusion == "undetermined"
    assert "bound of 2 extra builds" in search.why and search.culprits == []


def test_a_trial_that_cannot_decide_ends_the_search_without_blame() -> None:
    prs = _prs(4)
    answers = iter([TrialResult(Status.PASS, "ok"), TrialResult(Status.INCONCLUSIVE, "host unhealthy: thermal")])
    search = find_culprits(prs, lambda subset: next(answers), max_builds=6)
    assert search.conclusion == "undetermined" and search.culprits == []
    assert "host unhealthy: thermal" in search.why


def test_a_pr_that_breaks_only_together_with_an_earlier_one_is_named_with_its_partner() -> None:
    prs = _prs(4)  # prs[1] breaks the night only when prs[3] is there too

    def trial(subset: tuple[PullRef, ...]) -> TrialResult:
        return TrialResult(Status.FAIL if {prs[1], prs[3]} <= set(subset) else Status.PASS, "")

    search = find_culprits(prs, trial, max_builds=10)
    assert [pr for pr, _ in search.culprits] == [prs[3]]
    assert f"main + {prs[0]} + {prs[1]} + {prs[2]} passes; adding {prs[3]} fails" == search.culprits[0][1]
    assert search.passing == (prs[0], prs[1], prs[2])


def test_the_record_round_trips_to_json() -> None:
    prs = _prs(3)
    search = find_culprits(prs, _oracle({prs[2]}, []), max_builds=6)
    data = search.to_json()
    assert data["culprits"] == [
        {"pr": "flashinfer#102", "why": "main + flashinfer#100 + vllm#101 passes; adding flashinfer#102 fails"}
    ]
    assert data["passing"] == ["flashinfer#100", "vllm#101"] and data["conclusion"] == "culprits"
    assert data["trials"][0] == {"subset": [], "verdict": "PASS", "detail": "ok", "build": "", "seconds": 0.0}


def test_suspects_link_to_github_and_name_each_culprit_with_its_evidence() -> None:
    repo = "https://github.com/vllm-project/vllm.git"
    assert compare_url(repo, "a1", "b2") == "https://github.com/vllm-project/vllm/compare/a1...b2"
    assert (
        pull_url("git@github.com:flashinfer-ai/flashinfer.git", 7)
        == "https://github.com/flashinfer-ai/flashinfer/pull/7"
    )
    assert compare_url("https://git.example.org/vllm.git", "a", "b") is None
    moved = CommitRange("vllm", "a" * 40, "b" * 40, 9, ("bbbbbbb fix", "ccccccc feat"), compare_url(repo, "a", "b"))
    assert moved.describe() == (
        "vllm main aaaaaaaaaaaa..bbbbbbbbbbbb (9 commit(s)): https://github.com/vllm-project/vllm/compare/a...b "
        "[bbbbbbb fix; ccccccc feat; and 7 more]"
    )
    assert CommitRange("vllm", "a" * 40, "a" * 40, 0, (), None).describe().startswith("vllm main unchanged")

    plan = BuildPlan("2026-11-22T00:00:00Z", (SourcePlan("vllm", repo, "main", "m", "d", "c", "t", ()),))
    prs = [PullRef("vllm", 5), PullRef("vllm", 6)]
    found = find_culprits(prs, _oracle({prs[1]}, []), max_builds=6)
    assert describe_search(found, plan) == (
        "vllm#6 https://github.com/vllm-project/vllm/pull/6 (main + vllm#5 passes; adding vllm#6 fails) "
        "[culprit search: 2 extra build(s) of at most 6]"
    )
    stopped = find_culprits(prs, _oracle({prs[1]}, []), max_builds=1)
    assert describe_search(stopped, plan) == (
        "undetermined: the bound of 1 extra builds was reached before every culprit was found; suspects: vllm#5, vllm#6"
    )


def test_the_summary_shows_the_suspect_and_every_trial_of_the_search() -> None:
    prs = [PullRef("vllm", 5), PullRef("vllm", 6)]
    search = find_culprits(prs, _oracle({prs[1]}, []), max_builds=6)
    run = {"night": "2026-11-22", "verdict": "FAIL", "run_id": "r", "profile": "spark", "publish": ""}
    summary = render_summary(run | {"suspects": "vllm#6", "culprits": search.to_json()}, [])
    assert summary.endswith(
        "Suspect change: vllm#6\n\n## Culprit search\n\n"
        "culprits: 1 of 2 PR(s) break the failing entries (2 of at most 6 extra builds).\n\n"
        "| trial | main plus | built | time | verdict | detail |\n| --- | --- | --- | --- | --- | --- |\n"
        "| 1 | (main alone) | - | - | PASS | ok |\n| 2 | vllm#5 | - | - | PASS | ok |\n"
    )


def test_each_trial_shows_how_its_wheels_were_built_and_what_it_took() -> None:
    prs = [PullRef("vllm", 5), PullRef("vllm", 6)]

    def trial(subset: tuple[PullRef, ...]) -> TrialResult:
        if not subset:
            return TrialResult(Status.PASS, "ok", "vllm: cached overlay", 98.2)
        status = Status.FAIL if prs[1] in subset else Status.PASS
        return TrialResult(status, "x | y", "vllm: overlay (21 s)", 136.4)

    search = find_culprits(prs, trial, max_builds=6)
    run = {"night": "2026-11-22", "verdict": "FAIL", "run_id": "r", "profile": "cpu-built", "publish": ""}
    summary = render_summary(run | {"suspects": "vllm#6", "culprits": search.to_json()}, [])
    assert "| 1 | (main alone) | vllm: cached overlay | 98 s | PASS | ok |\n" in summary
    assert "| 2 | vllm#5 | vllm: overlay (21 s) | 136 s | PASS | x \\| y |\n" in summary


def test_a_trial_result_that_is_not_a_trials_status_is_refused_naming_it() -> None:
    """A caller still on the old words ("fail") gets the refusal, not an AttributeError from the refusal itself."""
    with pytest.raises(ValueError, match="not 'fail'"):
        TrialResult("fail", "")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="XFAIL"):
        TrialResult(Status.XFAIL, "")
