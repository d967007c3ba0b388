"""Bisecting main: the first commit between the last good night's main and tonight's that fails what failed tonight.

Pure: the caller builds and tests one commit (`try_commit`); this module only chooses which, at most
ceil(log2(N)) + 2 of N commits. A commit that cannot be built here is skipped and a neighbour tried instead; a
step that cannot decide is measured once more, then the search stops and reports the range it narrowed to.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pipeline.progress import Say, quiet
from pipeline.status import Status

_PR_NUMBER = re.compile(r"\(#(\d+)\)\s*$")  # vLLM's and FlashInfer's squash merges end their subject so


@dataclass(frozen=True)
class Commit:
    """One first-parent commit of main."""

    sha: str
    subject: str
    date: str  # author date, ISO 8601

    @property
    def pr(self) -> int | None:
        match = _PR_NUMBER.search(self.subject)
        return int(match[1]) if match else None

    def describe(self) -> str:
        pr = f", PR #{self.pr}" if self.pr else ""
        return f"{self.sha[:12]} \u201c{self.subject}\u201d ({self.date[:10]}{pr})"


@dataclass(frozen=True)
class StepResult:
    """What building and testing one commit said: PASS, FAIL, INCONCLUSIVE, or SKIPPED (it cannot be built here)."""

    status: Status
    detail: str
    build: str = ""  # "vllm: overlay (20 s)"
    seconds: float = 0.0


@dataclass(frozen=True)
class Step:
    commit: Commit
    result: StepResult


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

    @property
    def builds(self) -> int:
        """Steps that built and tested a commit (a skipped one built nothing)."""
        return sum(1 for step in self.steps if step.result.status != Status.SKIPPED)

    @property
    def range_text(self) -> str:
        return f"{self.last_good[:12]}..{self.last_bad[:12]}"

    def describe(self) -> str:
        """One line for the summary and the alert."""
        if self.first_bad is not None:
            return f"first bad commit of {self.source} main: {self.first_bad.describe()} ({self.why})"
        return f"{self.source} main broke between {self.range_text}: {self.why}"

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
            "steps": [
                {
                    "commit": s.commit.sha,
                    "subject": s.commit.subject,
                    "verdict": s.result.status.value,
                    "detail": s.result.detail,
                    "build": s.result.build,
                    "seconds": round(s.result.seconds, 1),
                }
                for s in self.steps
            ],
        }


def step_bound(count: int) -> int:
    """The most builds a bisection of `count` commits makes: ceil(log2(N)) + 2."""
    return math.ceil(math.log2(max(count, 1))) + 2


def bisect_main(
    source: str,
    good: str,
    commits: Sequence[Commit],
    try_commit: Callable[[Commit], StepResult],
    *,
    max_steps: int,
    say: Say = quiet,
) -> Bisection:
    """Known: `good` passes, `commits[-1]` (tonight's main) fails. Halve the range between them."""
    record = Bisection(source, good, tuple(commits), min(max_steps, step_bound(len(commits))), last_good=good)
    lo, hi = -1, len(commits) - 1  # indexes: lo passed (-1 is `good`), hi failed
    tried: dict[int, StepResult] = {}
    while hi - lo > 1:
        if record.builds >= record.max_steps:
            record.why = f"the bound of {record.max_steps} builds was reached"
            break
        mid = _buildable(lo, hi, tried)
        if mid is None:
            record.why = "every commit left in the range was skipped: " + "; ".join(
                f"{commits[i].sha[:12]}: {tried[i].detail}" for i in range(lo + 1, hi) if i in tried
            )
            break
        result = _run(record, commits[mid], try_commit, say)
        if result.status == Status.INCONCLUSIVE and record.builds < record.max_steps:
            result = _run(record, commits[mid], try_commit, say)  # measured once more
        tried[mid] = result
        if result.status == Status.PASS:
            lo = mid
        elif result.status == Status.FAIL:
            hi = mid
        elif result.status == Status.INCONCLUSIVE:
            record.why = f"{commits[mid].sha[:12]} could not be decided twice: {result.detail}"
            break
    record.last_good = good if lo < 0 else commits[lo].sha
    record.last_bad = commits[hi].sha
    if hi - lo == 1:
        record.first_bad = commits[hi]
        record.why = f"{record.builds} build(s) of at most {record.max_steps} over {len(commits)} commits"
    return record


def _buildable(lo: int, hi: int, tried: dict[int, StepResult]) -> int | None:
    """The middle of the open range, or the nearest commit to it that was not skipped already."""
    middle = (lo + hi) // 2
    for offset in range(hi - lo):
        for candidate in (middle + offset, middle - offset):
            if lo < candidate < hi and candidate not in tried:
                return candidate
    return None


def _run(record: Bisection, commit: Commit, try_commit: Callable[[Commit], StepResult], say: Say) -> StepResult:
    say(f"bisect build {record.builds + 1}/{record.max_steps}: {commit.describe()}")
    result = try_commit(commit)
    record.steps.append(Step(commit, result))
    say(f"bisect: {commit.sha[:12]}: {result.status.value}: {result.detail}")
    return result
