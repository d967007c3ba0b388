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
from pipeline.config.matrix import ModelEntry, Profile
from pipeline.errors import SparkNightlyError
from pipeline.infra.git import mirror_dir
from pipeline.outcome import Outcome
from pipeline.places import RunDir
from pipeline.progress import Say
from pipeline.settings import Settings
from pipeline.stages.aftermath.bisect import Bisection
from pipeline.stages.aftermath.bisect_run import bisect_failing_main
from pipeline.stages.aftermath.culprit import CulpritSearch, PullRef, TrialResult, find_culprits
from pipeline.stages.aftermath.suspects import describe_main_suspects, grafted_prs, pull_url, subset_sources
from pipeline.stages.build.build_plan import BuildPlan
from pipeline.stages.build.builders import BUILD_ORDER
from pipeline.stages.build.builders.base import BuildSource
from pipeline.stages.build.night_build import build_inspect_lock, sources_from, toolchain_for
from pipeline.stages.build.resolve import resolve_sources
from pipeline.stages.prove.candidate import NightCandidate, prepare_night_candidate
from pipeline.stages.prove.entry_run import EntryContext, run_entry
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

    def __init__(
        self,
        *,
        settings: Settings,
        config: Config,
        profile: Profile,
        plan: BuildPlan,
        night: NightRef,
        failing: Sequence[ModelEntry],
        say: Say,
    ) -> None:
        self.settings, self.config, self.profile, self.plan = settings, config, profile, plan
        self.night, self.failing, self.say = night, failing, say
        self.candidates: dict[tuple[PullRef, ...], NightCandidate] = {}
        self.outcomes: dict[tuple[PullRef, ...], list[Outcome]] = {}

    def __call__(self, subset: tuple[PullRef, ...]) -> TrialResult:
        started = time.monotonic()
        result, built = self._try(subset)
        return replace(result, build=built, seconds=time.monotonic() - started)

    def _try(self, subset: tuple[PullRef, ...]) -> tuple[TrialResult, str]:
        trial_id = f"{self.night.run_id}-try{len(self.candidates) + 1}"
        trial = self.night.run.culprit_trial(trial_id)
        cache_dir = self.settings.places.cache
        wheels_dir = self.settings.places.wheels
        try:
            sources = subset_sources(self.plan, subset, sources_from(self.settings, self.profile))
            plan = resolve_sources(sources, cache_dir=cache_dir, work_dir=trial.root, created=self.plan.created)
            plan.save(trial.plan)
            ordered = sorted(plan.sources, key=lambda source: BUILD_ORDER.index(source.name))
            built = build_inspect_lock(
                [BuildSource.from_plan(source, mirror_dir(cache_dir, source.repo)) for source in ordered],
                self.profile,
                toolchain_for(self.profile, self.settings),
                run=trial,
                out_dir=wheels_dir / trial_id,
                cache_dir=cache_dir,
                min_free_gib=self.settings.build_min_free_gib,
                say=self.say,
            )
            how = "; ".join(r.short() for r in built.results)
            if built.report.status == Status.FAIL:
                return TrialResult(Status.FAIL, f"inspection refused the wheels (see {trial.inspection})"), how
            candidate = prepare_night_candidate(
                self.profile, run=trial, wheels_dir=wheels_dir, cache_dir=cache_dir, say=self.say
            )
        except SparkNightlyError as exc:
            return TrialResult(Status.INCONCLUSIVE, f"{type(exc).__name__}: {exc}"), "not built"
        self.candidates[subset] = candidate
        outcomes = [self._run(entry, candidate, trial) for entry in self.failing]
        self.outcomes[subset] = outcomes
        return _judge(outcomes), how

    def _run(self, entry: ModelEntry, candidate: NightCandidate, trial: RunDir) -> Outcome:
        ctx = EntryContext(
            self.config,
            candidate.candidate,
            self.settings.places.cache,
            self.settings.places.state,
            trial,
            self.night.night,
            {},
            self.say,
            record=False,
        )
        return run_entry(entry, ctx)


def _judge(outcomes: Sequence[Outcome]) -> TrialResult:
    failed = [o for o in outcomes if o.status == Status.FAIL]
    if failed:
        return TrialResult(Status.FAIL, "; ".join(f"{o.entry}: {o.reason}" for o in failed)[:500])
    if all(o.status in {Status.PASS, Status.XFAIL} for o in outcomes):
        passed = ", ".join(o.entry for o in outcomes) or "the wheels' inspection"
        return TrialResult(Status.PASS, f"what failed tonight passes: {passed}")
    return TrialResult(
        Status.INCONCLUSIVE, "; ".join(f"{o.entry}: {o.status.value}: {o.reason}" for o in outcomes)[:500]
    )


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
    say: Say,
) -> CulpritFindings:
    """Suspects for a failing built night: a culprit search over its grafted PRs, else main's commit range."""
    plan = BuildPlan.load(night.run.plan)
    last_good = settings.places.state.last_good
    main_suspects = describe_main_suspects(last_good, plan, settings.places.cache)
    prs = grafted_prs(plan)

    def bisected(why: str, search: CulpritSearch | None) -> CulpritFindings:
        """main itself broke: its commits since the last good night halved, where the night can afford it."""
        found = None
        if settings.culprit_bisect_steps > 0:
            found = bisect_failing_main(
                settings, config, profile, plan, run=night.run, run_id=night.run_id, night=night.night,
                outcomes=outcomes, say=say,
            )  # fmt: skip
        named = f"{found.describe()}; " if found is not None else ""
        return CulpritFindings(f"{why}{named}{main_suspects}", search, None, bisection=found)

    if not prs:
        return bisected("", None)
    if settings.culprit_max_builds < 1:
        return CulpritFindings(main_suspects, None, None)
    failing_ids = {o.entry for o in outcomes if o.status == Status.FAIL}
    failing = [e for e in config.matrix.entries if e.id in failing_ids]  # the wheels pseudo-entry needs no boot
    trials = SparkTrials(
        settings=settings, config=config, profile=profile, plan=plan, night=night, failing=failing, say=say
    )
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
