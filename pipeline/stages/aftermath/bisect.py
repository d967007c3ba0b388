"""Bisecting main: the first commit between the last good night's main and tonight's that fails what failed tonight.

Pure: the caller builds and tests one commit (`try_commit`); this module only chooses which, at most
ceil(log2(N)) + 2 builds of N commits, as `git bisect` does. A step is bad only where it fails as tonight failed,
good where what failed tonight passes, and skipped otherwise (it does not build, fails at another stage or on other
checks, or the host could not judge it): the search goes on around a skipped commit and never retries it. When no
step passed, the last good commit itself is tried: if it fails too, the failure is not main's history. Where skips
leave it ambiguous the answer is a range with the skipped commits named.

A perf step is mostly decided on one boot of its build (detect/step_test.py), and one boot can lie: a boot slow in
every cell on a host whose boots spread wider than its record says. A wrong step anywhere leaves its mark on the
answer's boundary (with one true boundary, a wrong answer needs a wrong verdict at the last good step or the first bad
one), so before a commit is named the boundary's steps that rested on fewer than CONFIRM_BOOTS boots are tried again
on that many; a verdict the second look turns over is replaced, and the search goes on from there. A step whose
boots answered tonight's cells both ways (one like the last confirmed build, another like tonight's: a slow boot
reads the narrowest gap wrong first) is looked at again at once, rather than skipped and built around.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from pipeline.progress import Say, quiet
from pipeline.status import Status

# vLLM's and FlashInfer's squash merges end their subject with "(#N)"; a merge commit made by GitHub's merge button
# begins "Merge pull request #N from owner/branch"
_PR_NUMBER = re.compile(r"\(#(\d+)\)\s*$|^Merge pull request #(\d+) from ")

# a boundary step is named only on this many boots of its build: the GPU day of 2026-11-29 named a good commit whose
# one boot measured 0.66x (every cell of that boot slow) on an H200 whose good boots spread about 16 %
CONFIRM_BOOTS = 2


@dataclass(frozen=True)
class Commit:
    """One first-parent commit of main."""

    sha: str
    subject: str
    date: str  # author date, ISO 8601

    @property
    def pr(self) -> int | None:
        match = _PR_NUMBER.search(self.subject)
        return int(match[1] or match[2]) if match else None

    def describe(self) -> str:
        pr = f", PR #{self.pr}" if self.pr else ""
        return f"{self.sha[:12]} \u201c{self.subject}\u201d ({self.date[:10]}{pr})"


@dataclass(frozen=True)
class StepResult:
    """What building and testing one commit said, as git bisect reads it: PASS (good: what failed tonight passes),
    FAIL (bad: it fails as tonight failed), SKIPPED (it cannot tell: not built, failed otherwise, a host problem)."""

    status: Status
    detail: str
    build: str = ""  # "vllm: overlay (20 s)"
    seconds: float = 0.0
    built: bool = True  # False where nothing was built (a native commit the profile cannot build): costs no build
    boots: int = 0  # boots in turns its entries made (where one server fits; side by side none are counted)
    weighed_boots: int = 0  # the fewest boots of its build a perf cell was decided on against tonight's A (0: none)
    split: bool = False  # its boots answered tonight's cells both ways, one like A and one like B (looked at again)

    @property
    def rests_on_few_boots(self) -> bool:
        """A good or bad answer some perf cell decided on fewer than CONFIRM_BOOTS boots of the build."""
        return self.status in {Status.PASS, Status.FAIL} and 0 < self.weighed_boots < CONFIRM_BOOTS


@dataclass(frozen=True)
class Step:
    commit: Commit
    result: StepResult
    again: bool = False  # a boundary step tried again on CONFIRM_BOOTS boots before a commit is named


@dataclass
class Bisection:
    """The search's record: every step, and the first bad commit or the narrowest range it reached."""

    source: str
    good: str  # the last good night's main
    commits: tuple[Commit, ...]  # good..tonight, oldest first; the last one is tonight's main
    max_steps: int
    steps: list[Step] = field(default_factory=list)
    last_good: str = ""
    last_bad: str = ""  # the oldest commit seen failing (tonight's main until a step fails)
    first_bad: Commit | None = None
    why: str = ""
    candidates: tuple[Commit, ...] = ()  # where skips left it ambiguous: the commits the first bad one may be
    good_fails: bool = False  # the last good commit fails tonight too: not main's history
    held: str = ""  # the other sources as the steps held them ("flashinfer at 1a2b3c4d5e6f")
    separated_by: tuple[str, ...] = ()  # where two sources moved: the trials that chose this one

    @property
    def builds(self) -> int:
        """Steps that built and tested a commit (a native commit skipped before building built nothing; a boundary
        step tried again builds nothing new)."""
        return sum(1 for step in self.steps if step.result.built and not step.again)

    @property
    def confirmations(self) -> int:
        return sum(1 for step in self.steps if step.again)

    @property
    def range_text(self) -> str:
        return f"{self.last_good[:12]}..{self.last_bad[:12]}"

    def describe(self) -> str:
        """One line for the summary and the alert."""
        held = f", {self.held}" if self.held else ""
        if self.first_bad is not None:
            return f"first bad commit of {self.source} main{held}: {self.first_bad.describe()} ({self.why})"
        if self.good_fails:
            return f"not {self.source} main's history{held}: {self.why}"
        if self.candidates:
            named = ", ".join(c.describe() for c in self.candidates)
            return f"{self.source} main{held} broke at one of {len(self.candidates)} commits: {named} ({self.why})"
        return f"{self.source} main{held} broke between {self.range_text}: {self.why}"

    def to_json(self) -> dict[str, object]:
        bad = self.first_bad
        return {
            "source": self.source,
            "good": self.good,
            "commits": len(self.commits),
            "max_steps": self.max_steps,
            "last_good": self.last_good,
            "last_bad": self.last_bad,
            "first_bad": None if bad is None else {"sha": bad.sha, "subject": bad.subject, "date": bad.date},
            "first_bad_pr": None if bad is None else bad.pr,
            "why": self.why,
            "candidates": [c.sha for c in self.candidates],
            "good_fails": self.good_fails,
            "held": self.held,
            "separated_by": list(self.separated_by),
            "steps": [
                {
                    "commit": s.commit.sha,
                    "subject": s.commit.subject,
                    "verdict": s.result.status.value,
                    "detail": s.result.detail,
                    "build": s.result.build,
                    "seconds": round(s.result.seconds, 1),
                    "boots": s.result.boots,
                    "weighed_boots": s.result.weighed_boots,
                    "again": s.again,
                    "split": s.result.split,
                }
                for s in self.steps
            ],
        }


@dataclass(frozen=True)
class MovedSource:
    """A source whose main moved since the last good night: its last good commit and tonight's."""

    name: str
    good: str
    tonight: str


@dataclass(frozen=True)
class Separation:
    """Which of two moved sources to bisect, the other held, and the trials that showed it; or why none."""

    bisect: MovedSource | None
    held: Mapping[str, str]
    good_tested: bool  # the bisected range's good end passed tonight already (it was a trial)
    trials: tuple[str, ...]

    @property
    def why(self) -> str:
        return "no trial of one source alone was judged: " + "; ".join(self.trials)


def separate(
    first: MovedSource, second: MovedSource, try_commits: Callable[[Mapping[str, str]], StepResult]
) -> Separation:
    """Two moved sources, each trial changing one thing from a known end: tonight's `first` with `second` at its
    last good commit. Bad: `first`'s change is guilty, bisected with `second` held there. Good: `second`'s change is
    (with `first` at tonight's, which is then the good end). Not judged: the reverse trial, read the same way."""
    trials: list[str] = []
    for tonight, earlier in ((first, second), (second, first)):
        result = try_commits({tonight.name: tonight.tonight, earlier.name: earlier.good})
        trials.append(
            f"{tonight.name} {tonight.tonight[:12]} (tonight) with {earlier.name} {earlier.good[:12]} (last good): "
            f"{result.status.value}: {result.detail}"
        )
        if result.status == Status.FAIL:
            return Separation(tonight, {earlier.name: earlier.good}, False, tuple(trials))
        if result.status == Status.PASS:
            return Separation(earlier, {tonight.name: tonight.tonight}, True, tuple(trials))
    return Separation(None, {}, False, tuple(trials))


def step_bound(count: int) -> int:
    """The most builds a bisection of `count` commits makes: ceil(log2(N)) + 2."""
    return math.ceil(math.log2(max(count, 1))) + 2


def bisect_main(
    source: str,
    good: Commit,
    commits: Sequence[Commit],
    try_commit: Callable[[Commit], StepResult],
    *,
    max_steps: int,
    good_tested: bool = False,
    confirm: Callable[[Commit], StepResult] | None = None,
    say: Say = quiet,
) -> Bisection:
    """Known: `commits[-1]` (tonight's main) fails; `good` passed on the last good night (`good_tested`: it passed
    tonight already). Halve the range between them, skipped commits stepped around; before naming a commit, try the
    boundary's steps again with `confirm` where their answer rested on fewer than CONFIRM_BOOTS boots; test `good`
    when no step passed."""
    # without skips a search needs at most step_bound(N) builds; each skip costs one more, up to `max_steps` in all
    record = Bisection(source, good.sha, tuple(commits), max_steps, last_good=good.sha)
    tip = len(commits) - 1
    answers: dict[int, StepResult] = {}  # each tried commit's answer (a boundary's second look replaces its first)
    lo, hi = -1, tip  # indexes: lo passed (-1 is `good`), hi failed
    while True:
        while hi - lo > 1:
            if record.builds >= record.max_steps:
                record.why = f"the bound of {record.max_steps} builds was reached"
                break
            mid = _untried(lo, hi, answers)
            if mid is None:
                break
            answers[mid] = _look(record, commits[mid], try_commit, confirm, say)
            lo, hi = _ends(answers, tip)
        doubtful = [i for i in (lo, hi) if 0 <= i < tip and answers[i].rests_on_few_boots and not _again(record, i)]
        if record.why or confirm is None or not doubtful:
            break
        for index in doubtful:
            first, answers[index] = answers[index], _run(record, commits[index], confirm, say, again=True)
            second = answers[index].status
            if second != first.status:
                turned = f"{first.status.value} on its first look, {second.value} on {CONFIRM_BOOTS} boots"
                say(f"bisect: {commits[index].sha[:12]}: {turned}: the search goes on from there")
        lo, hi = _ends(answers, tip)
    skipped = {i: r for i, r in answers.items() if r.status not in {Status.PASS, Status.FAIL}}
    good_tested = good_tested or lo >= 0
    record.last_good = good.sha if lo < 0 else commits[lo].sha
    record.last_bad = commits[hi].sha
    if not good_tested and not record.why:
        _test_good_end(record, good, try_commit, confirm, say)
    if record.why:
        return record
    left = [commits[i] for i in range(lo + 1, hi)]
    counted = f"{record.builds} build(s) of at most {record.max_steps} over {len(commits)} commits"
    if record.confirmations:
        counted += f", {record.confirmations} tried again on {CONFIRM_BOOTS} boots"
    if not left:
        record.first_bad = commits[hi]
        record.why = counted
    else:
        record.candidates = (*left, commits[hi])
        reasons = "; ".join(f"{commits[i].sha[:12]}: {skipped[i].detail}" for i in range(lo + 1, hi))
        record.why = f"only skipped commits were left to test ({reasons}); {counted}"
    return record


def _ends(answers: Mapping[int, StepResult], tip: int) -> tuple[int, int]:
    """The range still open: the newest commit that passed (-1: the good end) and the oldest failing one after it
    (`tip`, tonight's main, where none did). A second look that turned a step over moves either end."""
    lo = max((i for i, r in answers.items() if r.status == Status.PASS), default=-1)
    hi = min((i for i, r in answers.items() if r.status == Status.FAIL and i > lo), default=tip)
    return lo, hi


def _again(record: Bisection, index: int) -> bool:
    """Whether the commit at `index` of the range was tried again already (each at most once)."""
    sha = record.commits[index].sha
    return any(step.again and step.commit.sha == sha for step in record.steps)


def _test_good_end(
    record: Bisection,
    good: Commit,
    try_commit: Callable[[Commit], StepResult],
    confirm: Callable[[Commit], StepResult] | None,
    say: Say,
) -> None:
    """No step passed: the last good commit itself, tonight. Failing too (on CONFIRM_BOOTS boots where a perf cell
    decided it), tonight's failure is not in this range; not judged, nothing in the range can be named."""
    result = _look(record, good, try_commit, confirm, say, also=_fails_on_few_boots)
    if result.status == Status.FAIL:
        record.good_fails = True
        record.why = (
            f"the last good commit {good.sha[:12]} fails tonight too ({result.detail}): the environment, a dependency "
            "or the host changed, not these commits"
        )
    elif result.status != Status.PASS:
        record.why = f"the last good commit {good.sha[:12]} could not be judged tonight: {result.detail}"


def _untried(lo: int, hi: int, tried: Mapping[int, StepResult]) -> int | None:
    """The middle of the open range, or the nearest commit to it that was not tried already (inside the open range
    only a skipped one was)."""
    middle = (lo + hi) // 2
    for offset in range(hi - lo):
        for candidate in (middle + offset, middle - offset):
            if lo < candidate < hi and candidate not in tried:
                return candidate
    return None


def _look(
    record: Bisection,
    commit: Commit,
    try_commit: Callable[[Commit], StepResult],
    confirm: Callable[[Commit], StepResult] | None,
    say: Say,
    *,
    also: Callable[[StepResult], bool] = lambda _: False,
) -> StepResult:
    """A step's first look; where its boots answered its cells both ways (or `also` asks for one), its second look at
    once, whose answer replaces the first (the boots of the first counted in, at least one more made): left skipped,
    the commit would cost the search a build around it, and another boot of a build already built costs far less."""
    result = _run(record, commit, try_commit, say)
    if confirm is None or not (result.split or also(result)):
        return result
    if result.split:
        say(f"bisect: {commit.sha[:12]}: its boots answered tonight's cells both ways: looking again")
    return _run(record, commit, confirm, say, again=True)


def _fails_on_few_boots(result: StepResult) -> bool:
    """The good end FAILing on fewer than CONFIRM_BOOTS boots: looked at twice before "not main's history" is said."""
    return result.status == Status.FAIL and result.rests_on_few_boots


def _run(
    record: Bisection, commit: Commit, try_commit: Callable[[Commit], StepResult], say: Say, *, again: bool = False
) -> StepResult:
    if again:
        say(f"bisect: {commit.describe()} again, on {CONFIRM_BOOTS} boots, before a commit is named")
    else:
        say(f"bisect build {record.builds + 1}/{record.max_steps}: {commit.describe()}")
    result = try_commit(commit)
    record.steps.append(Step(commit, result, again))
    say(f"bisect: {commit.sha[:12]}: {result.status.value}: {result.detail}")
    return result
