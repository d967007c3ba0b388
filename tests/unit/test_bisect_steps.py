"""A bisection step as CommitSteps.try_commits makes it (aftermath/bisect_run.py): every way a commit can fail to
build is a skip with its reason (never INCONCLUSIVE and built again), a build that gave no candidate is skipped unless
tonight's own failure was the wheels', the boots its entries made in turns are counted, and the fewest boots a perf
cell was decided on, which a boundary step tried again raises to bisect.CONFIRM_BOOTS."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from pipeline.errors import ProcessError, SparkNightlyError
from pipeline.outcome import Outcome
from pipeline.places import RunDir
from pipeline.stages.aftermath.bisect import CONFIRM_BOOTS, Commit
from pipeline.stages.aftermath.bisect_run import CommitSteps
from pipeline.stages.aftermath.trial_bench import Failing, TrialBench, TrialBuild
from pipeline.stages.build.build_plan import BuildPlan, SourcePlan
from pipeline.stages.build.night_build import NativeBuildNeeded
from pipeline.status import Status
from tests.unit.test_bisect import TONIGHT

PLAN = BuildPlan(
    "2026-11-29T01:00:00Z",
    (SourcePlan("vllm", "file:///vllm", "main", "b" * 40, "2026-11-29T00:00:00Z", "b" * 40, "", ()),),
)


class Bench:
    """A trial bench whose build raises or returns what it is given, and whose run returns given outcomes."""

    def __init__(self, built: TrialBuild | Exception, outcomes: list[Outcome] | None = None) -> None:
        self.built, self.outcomes = built, outcomes or []
        self.asked: list[Any] = []
        self.least: list[int] = []
        self.earlier: list[Any] = []

    def build(self, trial: RunDir, sources: Any) -> TrialBuild:
        self.asked.append([(s.name, s.ref) for s in sources])
        if isinstance(self.built, Exception):
            raise self.built
        return self.built

    def run(
        self, failed: Any, candidate: Any, trial: RunDir, *, least_boots: int = 1, earlier: Any = None
    ) -> list[Outcome]:
        self.least.append(least_boots)
        self.earlier.append(earlier)
        return self.outcomes


def _steps(tmp_path: Path, bench: Bench, failing: list[Failing] = TONIGHT) -> CommitSteps:
    return CommitSteps(cast(TrialBench, bench), plan=PLAN, run=RunDir(tmp_path / "run"), failing=failing)


def test_a_compile_error_is_a_skip_with_its_reason_not_retried(tmp_path: Path) -> None:
    bench = Bench(ProcessError("csrc/ops.cpp:12: error: expected ';'"))
    result = _steps(tmp_path, bench).try_commits({"vllm": "c" * 40})
    assert (result.status, result.build, result.built) == (Status.SKIPPED, "build failed", True)
    assert result.detail == "does not build here: ProcessError: csrc/ops.cpp:12: error: expected ';'"
    assert bench.asked == [[("vllm", "c" * 40)]]  # built once, the step's commit for the bisected source


def test_a_refused_base_or_broken_resolve_is_a_skip_too(tmp_path: Path) -> None:
    result = _steps(tmp_path, Bench(SparkNightlyError("the native base needs torch==2.10.0"))).try_commits({})
    assert result.status == Status.SKIPPED and result.detail.startswith("does not build here: SparkNightlyError: ")


def test_natives_this_profile_cannot_build_are_skipped_before_any_build(tmp_path: Path) -> None:
    result = _steps(tmp_path, Bench(NativeBuildNeeded("csrc/cpu/activation.cpp changed"))).try_commits({})
    assert (result.status, result.build, result.built) == (Status.SKIPPED, "not built", False)


def test_wheels_the_inspection_refused_are_a_skip_unless_tonight_failed_there(tmp_path: Path) -> None:
    refused = TrialBuild(None, "vllm: overlay (20 s)", "inspection refused the wheels (see inspection.json)")
    skipped = _steps(tmp_path / "a", Bench(refused)).try_commits({})
    assert (skipped.status, skipped.detail) == (Status.SKIPPED, refused.refused)
    bad = _steps(tmp_path / "b", Bench(refused), failing=[]).try_commits({})  # tonight failed at inspection itself
    assert bad.status == Status.FAIL


def test_a_step_counts_the_boots_its_entries_made_in_turns(tmp_path: Path) -> None:
    candidate = cast(Any, SimpleNamespace())
    outcome = Outcome(
        "m", Status.FAIL, "golden", "1 golden check(s) failed", True, 1.0, numbers={"turns": {"boots": 2}}
    )
    result = _steps(tmp_path, Bench(TrialBuild(candidate, "vllm: overlay (20 s)"), [outcome])).try_commits({})
    assert result.boots == 2 and result.build == "vllm: overlay (20 s)"


def test_a_step_says_the_fewest_boots_a_cell_was_decided_on_and_its_second_look_asks_two(tmp_path: Path) -> None:
    candidate = cast(Any, SimpleNamespace())
    cells = {
        "tg32 (c4)": {
            "status": "FAIL",
            "value": 1509.3,
            "b_over_a": 0.66,
            "pairs": 0,
            "step_boots": 1,
            "step_logs": [7.3193],
        },
        "pp128 (c1)": {"status": "PASS", "value": 4988.7},  # not asked tonight: decided on no boot of its own
    }
    outcome = Outcome("m", Status.FAIL, "perf", "tg32 (c4): 0.66x", True, 1.0, numbers={"cells": cells})
    bench = Bench(TrialBuild(candidate, "vllm: overlay (17 s)"), [outcome])
    perf = [Failing(TONIGHT[0].entry, "perf", {"tg32 (c4)": 0.61})]  # tonight's pairs FAILed tg32 (c4) at 0.61x
    steps = _steps(tmp_path, bench, perf)
    first = steps.stepping("vllm", {})(Commit("c" * 40, "[Core] Tidy (#33006)", "2026-11-01T00:00:00Z"))
    assert first.weighed_boots == 1 and first.rests_on_few_boots and bench.least == [1]
    steps.stepping("vllm", {}).again(Commit("c" * 40, "[Core] Tidy (#33006)", "2026-11-01T00:00:00Z"))
    assert bench.least == [1, CONFIRM_BOOTS] and bench.asked == [[("vllm", "c" * 40)]] * 2
    # the second look starts from the first look's boot of the cell it asked about
    assert bench.earlier == [{}, {"m": {"tg32 (c4)": (7.3193,)}}]
    golden = Outcome("m", Status.FAIL, "golden", "1 golden check(s) failed", True, 1.0)
    decided_by_golden = _steps(tmp_path / "g", Bench(TrialBuild(candidate, "x"), [golden])).try_commits({})
    assert decided_by_golden.weighed_boots == 0 and not decided_by_golden.rests_on_few_boots
