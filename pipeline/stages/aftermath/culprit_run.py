"""The culprit stage of a failing built night: trials of main plus PR subsets on the failing entries, and suspects.

A trial is the night in small: resolve tonight's pinned commits with only some PRs, build (unchanged
sources are cache hits), inspect, lock, make the runtime, and run only the entries that failed, with
the history read but never written. Its files live in runs/<run>/culprit/<trial>/.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from pipeline.config.bundle import Config
from pipeline.config.matrix import Profile
from pipeline.errors import SparkNightlyError
from pipeline.infra.supply import Supply
from pipeline.outcome import Outcome
from pipeline.places import RunDir
from pipeline.progress import Say
from pipeline.settings import Settings
from pipeline.stages.aftermath.bisect import Bisection
from pipeline.stages.aftermath.bisect_run import NotBisected, bisect_failing_main
from pipeline.stages.aftermath.culprit import CulpritSearch, PullRef, TrialResult, find_culprits
from pipeline.stages.aftermath.suspects import describe_main_suspects, grafted_prs, pull_url, subset_sources
from pipeline.stages.aftermath.trial_bench import Failing, TrialBench, failed_at, trial_verdict
from pipeline.stages.build.build_plan import BuildPlan
from pipeline.stages.build.night_build import sources_from
from pipeline.stages.prove.candidate import NightCandidate
from pipeline.status import Status

WHEELS_ENTRY = "wheels"  # the pseudo-entry of a night whose wheels inspection refused


@dataclass(frozen=True)
class NightRef:
    """The night the trials belong to."""

    run_id: str
    night: str
    run: RunDir


@dataclass(frozen=True)
class CulpritFindings:
    """What the alerts say about the change to blame, and what may be published instead of the whole night."""

    suspects: str
    search: CulpritSearch | None
    replacement: NightCandidate | None  # main plus the PRs that passed, when a trial proved it
    replacement_outcomes: tuple[Outcome, ...] = ()  # the failing entries as that trial ran them
    bisection: Bisection | None = None  # main's commits halved, where main alone fails


class SparkTrials:
    """Runs one trial per subset; remembers each trial's candidate so a passing one can be published."""

    def __init__(self, bench: TrialBench, *, plan: BuildPlan, night: NightRef, failing: Sequence[Failing]) -> None:
        self.bench, self.plan, self.night, self.failing = bench, plan, night, failing
        self.candidates: dict[tuple[PullRef, ...], NightCandidate] = {}
        self.outcomes: dict[tuple[PullRef, ...], list[Outcome]] = {}

    def __call__(self, subset: tuple[PullRef, ...]) -> TrialResult:
        started = time.monotonic()
        result, built = self._try(subset)
        return replace(result, build=built, seconds=time.monotonic() - started)

    def _try(self, subset: tuple[PullRef, ...]) -> tuple[TrialResult, str]:
        trial = self.night.run.culprit_trial(f"{self.night.run_id}-try{len(self.candidates) + 1}")
        try:
            sources = subset_sources(self.plan, subset, sources_from(self.bench.settings, self.bench.profile))
            built = self.bench.build(trial, sources)
        except SparkNightlyError as exc:
            return TrialResult(Status.INCONCLUSIVE, f"{type(exc).__name__}: {exc}"), "not built"
        if built.candidate is None:
            return TrialResult(Status.FAIL, built.refused), built.how
        self.candidates[subset] = built.candidate
        outcomes = self.bench.run(self.failing, built.candidate, trial)
        self.outcomes[subset] = outcomes
        return _judge(outcomes), built.how


def _judge(outcomes: Sequence[Outcome]) -> TrialResult:
    return TrialResult(*trial_verdict(outcomes))


def describe_search(search: CulpritSearch, plan: BuildPlan) -> str:
    """One paragraph for the alerts: the culprits with their PR links, or why none was named."""
    repos = {s.name: s.repo for s in plan.sources}
    if search.conclusion == "culprits":
        blamed = "; ".join(f"{_pr_link(pr, repos[pr.source])} ({why})" for pr, why in search.culprits)
        return f"{blamed} [culprit search: {len(search.trials)} extra build(s) of at most {search.max_builds}]"
    remaining = ", ".join(str(pr) for pr in search.prs if pr not in {c for c, _ in search.culprits})
    found = "; ".join(f"{_pr_link(pr, repos[pr.source])} ({why})" for pr, why in search.culprits)
    return f"undetermined: {search.why}" + (f"; found so far: {found}" if found else "") + f"; suspects: {remaining}"


def _pr_link(pr: PullRef, repo: str) -> str:
    url = pull_url(repo, pr.number)
    return f"{pr} {url}" if url else str(pr)


def find_culprit(
    settings: Settings,
    config: Config,
    profile: Profile,
    night: NightRef,
    outcomes: Sequence[Outcome],
    *,
    supply: Supply,
    say: Say,
) -> CulpritFindings:
    """Suspects for a failing built night: a culprit search over its grafted PRs, else main's commit range."""
    plan = BuildPlan.load(night.run.plan)
    bench = TrialBench(settings, config, profile, supply, night.night, plan.created, say)
    last_good = settings.places.state.last_good
    main_suspects = describe_main_suspects(last_good, plan, settings.places.cache)
    prs = grafted_prs(plan)

    def bisected(why: str, search: CulpritSearch | None) -> CulpritFindings:
        """main itself broke: its commits since the last good night halved, where the night can afford it."""
        if settings.culprit_bisect_steps > 0:
            found: Bisection | NotBisected = bisect_failing_main(bench, plan, run=night.run, outcomes=outcomes)
        else:
            found = NotBisected("culprit.bisect_steps is 0 on this runner")
        bisection = found if isinstance(found, Bisection) else None
        return CulpritFindings(f"{why}{found.describe()}; {main_suspects}", search, None, bisection=bisection)

    if not prs:
        return bisected("", None)
    if settings.culprit_max_builds < 1:
        return CulpritFindings(main_suspects, None, None)
    failing = failed_at(config.matrix.entries, outcomes)  # the wheels pseudo-entry needs no boot
    trials = SparkTrials(bench, plan=plan, night=night, failing=failing)
    say(f"culprit search: {len(prs)} grafted PR(s), at most {settings.culprit_max_builds} extra build(s)")
    search = find_culprits(prs, trials, max_builds=settings.culprit_max_builds, say=say)
    _save(night.run.culprit_search, search)
    if search.conclusion == "main-fails":
        return bisected(f"main itself ({search.why}); ", search)
    suspects = describe_search(search, plan)
    if search.conclusion != "culprits" or settings.culprit_publish != "without-culprits" or search.passing is None:
        return CulpritFindings(suspects, search, None)
    passing = search.passing
    return CulpritFindings(suspects, search, trials.candidates[passing], tuple(trials.outcomes[passing]))


def _save(path: Path, search: CulpritSearch) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(search.to_json(), indent=2) + "\n")
