"""A failing built night whose main alone fails: each step builds one commit of main between the last good night and
tonight (an overlay where its native inputs equal a base's, skipped where the profile cannot build it) and runs only
the entries that failed tonight; the history is read, never written. Its files live in runs/<run>/culprit/."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

from pipeline.config.bundle import Config
from pipeline.config.matrix import ModelEntry, Profile
from pipeline.errors import SparkNightlyError
from pipeline.infra.git import Git, mirror_dir
from pipeline.outcome import Outcome
from pipeline.places import RunDir
from pipeline.progress import Say
from pipeline.settings import Settings
from pipeline.stages.aftermath.bisect import Bisection, Commit, StepResult, bisect_main, step_bound
from pipeline.stages.build.build_plan import BuildPlan, SourcePlan
from pipeline.stages.build.builders import BUILD_ORDER
from pipeline.stages.build.builders.base import BuildSource
from pipeline.stages.build.night_build import NativeBuildNeeded, build_inspect_lock, toolchain_for
from pipeline.stages.build.resolve import Source, resolve_sources
from pipeline.stages.prove.boot import Candidate
from pipeline.stages.prove.candidate import prepare_night_candidate
from pipeline.stages.prove.entry_run import EntryContext, run_entry
from pipeline.status import Status


class CommitSteps:
    """Builds and tests one commit of the bisected source, the other sources at tonight's main."""

    def __init__(  # noqa: PLR0913 -- the night's context, by keyword
        self,
        *,
        settings: Settings,
        config: Config,
        profile: Profile,
        plan: BuildPlan,
        bisected: str,
        run: RunDir,
        run_id: str,
        night: str,
        failing: Sequence[ModelEntry],
        say: Say,
    ) -> None:
        self.settings, self.config, self.profile, self.plan = settings, config, profile, plan
        self.bisected, self.run, self.run_id, self.night = bisected, run, run_id, night
        self.failing, self.say = failing, say
        self.count = 0

    def __call__(self, commit: Commit) -> StepResult:
        started = time.monotonic()
        self.count += 1
        trial = self.run.culprit_trial(f"{self.run_id}-bisect{self.count}")
        cache_dir = self.settings.places.cache
        sources = [
            Source(s.name, s.repo, commit.sha if s.name == self.bisected else s.main_commit, (), f"sources.{s.name}")
            for s in self.plan.sources
        ]
        try:
            plan = resolve_sources(sources, cache_dir=cache_dir, work_dir=trial.root, created=self.plan.created)
            plan.save(trial.plan)
            ordered = sorted(plan.sources, key=lambda source: BUILD_ORDER.index(source.name))
            built = build_inspect_lock(
                [BuildSource.from_plan(s, mirror_dir(cache_dir, s.repo)) for s in ordered],
                self.profile,
                toolchain_for(self.profile, self.settings),
                run=trial,
                out_dir=self.settings.places.wheels / trial.id,
                cache_dir=cache_dir,
                min_free_gib=self.settings.build_min_free_gib,
                say=self.say,
            )
        except NativeBuildNeeded as exc:
            return StepResult(Status.SKIPPED, str(exc), "not built", time.monotonic() - started)
        except SparkNightlyError as exc:
            return StepResult(Status.INCONCLUSIVE, f"{type(exc).__name__}: {exc}", "", time.monotonic() - started)
        how = "; ".join(r.short() for r in built.results)
        if built.report.status == Status.FAIL:
            return StepResult(Status.FAIL, "inspection refused the wheels", how, time.monotonic() - started)
        try:
            candidate = prepare_night_candidate(
                self.profile, run=trial, wheels_dir=self.settings.places.wheels, cache_dir=cache_dir, say=self.say
            )
        except SparkNightlyError as exc:
            return StepResult(Status.INCONCLUSIVE, f"{type(exc).__name__}: {exc}", how, time.monotonic() - started)
        outcomes = [self._run(entry, candidate.candidate, trial) for entry in self.failing]
        status, detail = _judge(outcomes)
        return StepResult(status, detail, how, time.monotonic() - started)

    def _run(self, entry: ModelEntry, candidate: Candidate, trial: RunDir) -> Outcome:
        ctx = EntryContext(
            self.config,
            candidate,
            self.settings.places.cache,
            self.settings.places.state,
            trial,
            self.night,
            {},
            self.say,
            record=False,
        )
        return run_entry(entry, ctx)


def _judge(outcomes: Sequence[Outcome]) -> tuple[Status, str]:
    failed = [o for o in outcomes if o.status == Status.FAIL]
    if failed:
        return Status.FAIL, "; ".join(f"{o.entry}: {o.reason}" for o in failed)[:300]
    if all(o.status in {Status.PASS, Status.XFAIL} for o in outcomes):
        return Status.PASS, "what failed tonight passes"
    return Status.INCONCLUSIVE, "; ".join(f"{o.entry}: {o.status.value}: {o.reason}" for o in outcomes)[:300]


def main_commits(mirror: Git, good: str, tonight: str) -> list[Commit]:
    """main's first-parent commits after `good` up to `tonight`, oldest first."""
    out = mirror("log", "--first-parent", "--reverse", "--format=%H%x1f%s%x1f%aI", f"{good}..{tonight}")
    return [Commit(*line.split("\x1f")) for line in out.splitlines() if line]


def bisect_failing_main(  # noqa: PLR0913 -- the night's context, by keyword
    settings: Settings,
    config: Config,
    profile: Profile,
    plan: BuildPlan,
    *,
    run: RunDir,
    run_id: str,
    night: str,
    outcomes: Sequence[Outcome],
    say: Say,
) -> Bisection | None:
    """The bisection of the one source whose main moved since the last good night (None when there is no record,
    no move, or more than one source moved: then the range is what the night names)."""
    last_good = settings.places.state.last_good
    if not last_good.exists():
        return None
    before = json.loads(last_good.read_text())["sources"]
    moved = [s for s in plan.sources if s.name in before and before[s.name]["main_commit"] != s.main_commit]
    if len(moved) != 1:
        return None
    source: SourcePlan = moved[0]
    mirror = Git(mirror_dir(settings.places.cache, source.repo))
    good = before[source.name]["main_commit"]
    if not mirror.is_ancestor(good, source.main_commit):
        return None
    commits = main_commits(mirror, good, source.main_commit)
    failing_ids = {o.entry for o in outcomes if o.status == Status.FAIL}
    steps = CommitSteps(
        settings=settings,
        config=config,
        profile=profile,
        plan=plan,
        bisected=source.name,
        run=run,
        run_id=run_id,
        night=night,
        failing=[e for e in config.matrix.entries if e.id in failing_ids],
        say=say,
    )
    bound = min(settings.culprit_bisect_steps, step_bound(len(commits)))
    say(f"bisect: {source.name} main {good[:12]}..{source.main_commit[:12]}, {len(commits)} commits, at most {bound}")
    found = bisect_main(source.name, good, commits, steps, max_steps=bound, say=say)
    save(run.bisection, found)
    return found


def save(path: Path, found: Bisection) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(found.to_json(), indent=2) + "\n")
