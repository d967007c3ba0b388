"""A failing built night whose main alone fails: each step builds one commit of main between the last good night and
tonight (an overlay where its native inputs equal a base's, skipped where the profile cannot build it) and runs only
the entries that failed tonight; the history is read, never written. Its files live in runs/<run>/culprit/."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

from pipeline.errors import SparkNightlyError
from pipeline.infra.git import Git, mirror_dir
from pipeline.outcome import Outcome
from pipeline.places import RunDir
from pipeline.stages.aftermath.bisect import Bisection, Commit, StepResult, bisect_main, step_bound
from pipeline.stages.aftermath.trial_bench import Failing, TrialBench, failed_at, trial_verdict
from pipeline.stages.build.build_plan import BuildPlan, SourcePlan
from pipeline.stages.build.night_build import NativeBuildNeeded
from pipeline.stages.build.resolve import Source
from pipeline.status import Status


class CommitSteps:
    """Builds and tests one commit of the bisected source, the other sources at tonight's main."""

    def __init__(
        self,
        bench: TrialBench,
        *,
        plan: BuildPlan,
        bisected: str,
        run: RunDir,
        failing: Sequence[Failing],
    ) -> None:
        self.bench, self.plan, self.bisected, self.run, self.failing = bench, plan, bisected, run, failing
        self.count = 0

    def __call__(self, commit: Commit) -> StepResult:
        started = time.monotonic()
        self.count += 1
        trial = self.run.culprit_trial(f"{self.run.id}-bisect{self.count}")
        sources = [
            Source(s.name, s.repo, commit.sha if s.name == self.bisected else s.main_commit, (), f"sources.{s.name}")
            for s in self.plan.sources
        ]
        try:
            built = self.bench.build(trial, sources)
        except NativeBuildNeeded as exc:
            return StepResult(Status.SKIPPED, str(exc), "not built", time.monotonic() - started)
        except SparkNightlyError as exc:
            return StepResult(Status.INCONCLUSIVE, f"{type(exc).__name__}: {exc}", "", time.monotonic() - started)
        if built.candidate is None:
            return StepResult(Status.FAIL, built.refused, built.how, time.monotonic() - started)
        outcomes = self.bench.run(self.failing, built.candidate, trial)
        status, detail = trial_verdict(outcomes)
        return StepResult(status, detail, built.how, time.monotonic() - started)


def main_commits(mirror: Git, good: str, tonight: str) -> list[Commit]:
    """main's first-parent commits after `good` up to `tonight`, oldest first."""
    out = mirror("log", "--first-parent", "--reverse", "--format=%H%x1f%s%x1f%aI", f"{good}..{tonight}")
    return [Commit(*line.split("\x1f")) for line in out.splitlines() if line]


def bisect_failing_main(
    bench: TrialBench, plan: BuildPlan, *, run: RunDir, outcomes: Sequence[Outcome]
) -> Bisection | None:
    """The bisection of the one source whose main moved since the last good night (None when there is no record,
    no move, or more than one source moved: then the range is what the night names)."""
    settings, say = bench.settings, bench.say
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
    failing = failed_at(bench.config.matrix.entries, outcomes)
    steps = CommitSteps(bench, plan=plan, bisected=source.name, run=run, failing=failing)
    bound = min(settings.culprit_bisect_steps, step_bound(len(commits)))
    say(f"bisect: {source.name} main {good[:12]}..{source.main_commit[:12]}, {len(commits)} commits, at most {bound}")
    found = bisect_main(source.name, good, commits, steps, max_steps=bound, say=say)
    save(run.bisection, found)
    return found


def save(path: Path, found: Bisection) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(found.to_json(), indent=2) + "\n")
