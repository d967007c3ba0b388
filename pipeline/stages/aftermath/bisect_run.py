"""A failing built night whose main alone fails: each step builds one commit of main between the last good night and
tonight (an overlay where its native inputs equal a base's, skipped where the profile cannot build it) and runs only
the entries that failed tonight; the history is read, never written. Where vLLM and FlashInfer both moved, one trial
(or two) first tells which source to bisect, the other held. Every reason a bisection does not run is said. Its
files live in runs/<run>/culprit/."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import SparkNightlyError
from pipeline.infra.git import Git, mirror_dir
from pipeline.outcome import Outcome, cells_of
from pipeline.places import RunDir
from pipeline.stages.aftermath.bisect import (
    CONFIRM_BOOTS,
    Bisection,
    Commit,
    MovedSource,
    StepResult,
    bisect_main,
    separate,
)
from pipeline.stages.aftermath.suspects import GoodCommits, LastGoodNight
from pipeline.stages.aftermath.trial_bench import Failing, TrialBench, cells_disagree, failed_at, step_verdict
from pipeline.stages.build.build_plan import BuildPlan, SourcePlan
from pipeline.stages.build.night_build import NativeBuildNeeded
from pipeline.stages.build.resolve import Source
from pipeline.status import Status


@dataclass(frozen=True)
class NotBisected:
    """Why main's history was not bisected tonight, in one line for the summary and the alert."""

    why: str

    def describe(self) -> str:
        return f"not bisected: {self.why}"


class CommitSteps:
    """Builds and tests the sources at given commits (the bisected one at a step's commit, the others held)."""

    def __init__(self, bench: TrialBench, *, plan: BuildPlan, run: RunDir, failing: Sequence[Failing]) -> None:
        self.bench, self.plan, self.run, self.failing = bench, plan, run, failing
        self.count = 0
        # each trial's boots of the cells it asked about, by entry and cell (a second look starts from them)
        self.looks: dict[tuple[tuple[str, str], ...], dict[str, dict[str, tuple[float, ...]]]] = {}

    def stepping(self, bisected: str, held: Mapping[str, str]) -> _Stepping:
        return _Stepping(self, bisected, held)

    def try_commits(self, commits: Mapping[str, str], *, least_boots: int = 1) -> StepResult:
        """One trial of these commits (by source; a source not named at tonight's main), judged as a bisection
        step: bad only where it fails as tonight failed; a perf cell decided on `least_boots` boots at least, counting
        the boots an earlier trial of the same commits made (a second look adds to its first)."""
        key = tuple(sorted(commits.items()))
        started = time.monotonic()
        self.count += 1
        trial = self.run.culprit_trial(f"{self.run.id}-bisect{self.count}")
        sources = [
            Source(s.name, s.repo, commits.get(s.name, s.main_commit), (), f"sources.{s.name}")
            for s in self.plan.sources
        ]
        try:
            built = self.bench.build(trial, sources)
        except NativeBuildNeeded as exc:
            return StepResult(Status.SKIPPED, str(exc), "not built", time.monotonic() - started, built=False)
        except SparkNightlyError as exc:  # a compile error, a broken resolve, a refused base: not judged, not retried
            why = f"does not build here: {type(exc).__name__}: {exc}"
            return StepResult(Status.SKIPPED, why, "build failed", time.monotonic() - started)
        if built.candidate is None:  # bad only where tonight's failure was the wheels' inspection itself
            status = Status.SKIPPED if self.failing else Status.FAIL
            return StepResult(status, built.refused, built.how, time.monotonic() - started)
        earlier = self.looks.get(key, {}) if least_boots > 1 else {}
        outcomes = self.bench.run(self.failing, built.candidate, trial, least_boots=least_boots, earlier=earlier)
        self.looks[key] = {
            o.entry: {name: cell.step_logs for name, cell in cells_of(o.numbers).items() if cell.step_logs}
            for o in outcomes
        }
        status, detail = step_verdict(self.failing, outcomes)
        boots = sum(int(o.numbers.get("turns", {}).get("boots", 0)) for o in outcomes)
        weighed = [cell.step_boots for o in outcomes for cell in cells_of(o.numbers).values() if cell.step_boots]
        took = time.monotonic() - started
        weighed_boots, split = min(weighed, default=0), cells_disagree(self.failing, outcomes)
        return StepResult(status, detail, built.how, took, boots=boots, weighed_boots=weighed_boots, split=split)


@dataclass(frozen=True)
class _Stepping:
    """The step function of one bisection: the bisected source at the step's commit, the others held."""

    steps: CommitSteps
    bisected: str
    held: Mapping[str, str]

    def __call__(self, commit: Commit) -> StepResult:
        return self.steps.try_commits({**self.held, self.bisected: commit.sha})

    def again(self, commit: Commit) -> StepResult:
        """The step tried again before a commit is named (its builds cached): its perf cells on CONFIRM_BOOTS boots at
        least, its first look's among them, so one boot more where one decided it."""
        return self.steps.try_commits({**self.held, self.bisected: commit.sha}, least_boots=CONFIRM_BOOTS)


def main_commits(mirror: Git, good: str, tonight: str) -> list[Commit]:
    """main's first-parent commits after `good` up to `tonight` that contain `good`, oldest first: a good commit
    reached only through a merge's second parent is in none of the first-parent commits before that merge."""
    out = mirror("log", "--first-parent", "--reverse", "--format=%H%x1f%s%x1f%aI", f"{good}..{tonight}")
    containing = set(mirror("rev-list", "--ancestry-path", f"{good}..{tonight}").split())
    commits = [Commit(*line.split("\x1f")) for line in out.splitlines() if line]
    return [commit for commit in commits if commit.sha in containing]


def commit_of(mirror: Git, sha: str) -> Commit:
    return Commit(*mirror("log", "-1", "--format=%H%x1f%s%x1f%aI", sha).strip().split("\x1f"))


@dataclass(frozen=True)
class Moved:
    """One source's main since the last good night."""

    source: SourcePlan
    good: str
    mirror: Git

    @property
    def name(self) -> str:
        return self.source.name

    @property
    def tonight(self) -> str:
        return self.source.main_commit


def moved_sources(plan: BuildPlan, before: Mapping[str, GoodCommits], cache_dir: Path) -> list[Moved] | NotBisected:
    """The sources whose main moved since the last good night (`before`: its sources by name), each from its
    last good main, which must be an ancestor of tonight's; else why nothing can be bisected."""
    moved = []
    for source in plan.sources:
        if source.name not in before or before[source.name].main_commit == source.main_commit:
            continue
        mirror = Git(mirror_dir(cache_dir, source.repo))
        good = before[source.name].main_commit
        if not mirror.is_ancestor(good, source.main_commit):
            return NotBisected(
                f"{source.name}: the last good night's main {good[:12]} is no ancestor of tonight's "
                f"{source.main_commit[:12]} (main was force-pushed)"
            )
        moved.append(Moved(source, good, mirror))
    if not moved:
        return NotBisected("no source's main moved since the last good night: tonight's failure is not main's history")
    return moved


def bisect_failing_main(
    bench: TrialBench, plan: BuildPlan, *, run: RunDir, outcomes: Sequence[Outcome]
) -> Bisection | NotBisected:
    """The bisection of the source whose main moved since the last good night; where two moved, the one a trial
    with the other at its last good commit shows guilty. Every reason it does not run is the answer."""
    last_good = LastGoodNight.read(bench.settings.places.state.last_good)
    if last_good is None:
        return NotBisected("this runner has no last good night to bisect from")
    moved = moved_sources(plan, last_good.sources, bench.settings.places.cache)
    if isinstance(moved, NotBisected):
        return moved
    steps = CommitSteps(bench, plan=plan, run=run, failing=failed_at(bench.config.matrix.entries, outcomes))
    found: Bisection | NotBisected
    if len(moved) == 1:
        found = _bisect(bench, steps, moved[0], held={}, good_tested=False)
    else:
        found = _separate_then_bisect(bench, steps, moved)
    save(run.bisection, found)
    return found


def _separate_then_bisect(bench: TrialBench, steps: CommitSteps, moved: Sequence[Moved]) -> Bisection | NotBisected:
    """Two moved sources: a trial of one alone (bisect.separate) tells which to bisect, the other held."""
    if len(moved) != 2:
        return NotBisected(f"{len(moved)} sources moved: {', '.join(m.name for m in moved)}")
    by_name = {m.name: m for m in moved}
    first, second = (MovedSource(m.name, m.good, m.tonight) for m in moved)
    chosen = separate(first, second, steps.try_commits)
    for line in chosen.trials:
        bench.say(f"bisect: {line}")
    if chosen.bisect is None:
        return NotBisected(f"{first.name} and {second.name} both moved; {chosen.why}")
    found = _bisect(bench, steps, by_name[chosen.bisect.name], held=chosen.held, good_tested=chosen.good_tested)
    found.separated_by = chosen.trials
    return found


def _bisect(
    bench: TrialBench, steps: CommitSteps, moved: Moved, *, held: Mapping[str, str], good_tested: bool
) -> Bisection:
    commits = main_commits(moved.mirror, moved.good, moved.tonight)
    bound = bench.settings.culprit_bisect_steps
    held_text = ", ".join(f"{name} at {sha[:12]}" for name, sha in held.items())
    bench.say(
        f"bisect: {moved.name} main {moved.good[:12]}..{moved.tonight[:12]}, {len(commits)} commits, at most {bound}"
        + (f"; {held_text}" if held_text else "")
    )
    stepping = steps.stepping(moved.name, held)
    found = bisect_main(
        moved.name,
        commit_of(moved.mirror, moved.good),
        commits,
        stepping,
        max_steps=bound,
        good_tested=good_tested,
        confirm=stepping.again,
        say=bench.say,
    )
    found.held = held_text
    return found


def save(path: Path, found: Bisection | NotBisected) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = found.to_json() if isinstance(found, Bisection) else {"not_bisected": found.why}
    path.write_text(json.dumps(data, indent=2) + "\n")
