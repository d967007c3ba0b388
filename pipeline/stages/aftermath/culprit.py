"""Culprit search: which grafted PR broke a failing night, by testing subsets (main alone, then halving).

A trial builds main plus a subset of tonight's PRs and runs only the entries that failed. The search
spends at most `max_builds` trials. Under the usual assumption that a PR breaks the night on its own
or together with PRs grafted before it, halving finds each culprit in about log2(n) trials; after
each culprit it tries everything else at once, so one bad PR among n costs 1 + log2(n) + 1 trials.
Every subset the search ends up recommending was itself a trial that passed, so its wheels exist.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pipeline.progress import Say, quiet
from pipeline.status import Status

# What a trial can say: the night's own statuses (a trial that could not decide is INCONCLUSIVE)
TRIAL_STATUSES = (Status.PASS, Status.FAIL, Status.INCONCLUSIVE)
Conclusion = Literal["culprits", "main-fails", "undetermined"]


@dataclass(frozen=True, order=True)
class PullRef:
    """One grafted PR of one source."""

    source: str
    number: int

    def __str__(self) -> str:
        return f"{self.source}#{self.number}"


@dataclass(frozen=True)
class TrialResult:
    """What one subset did on the failing entries."""

    status: Status  # PASS, FAIL or INCONCLUSIVE
    detail: str  # the failing entries' reasons, or why the trial could not decide
    build: str = ""  # how the trial's wheels were made: "vllm: overlay (20 s)", "vllm: cached overlay"
    seconds: float = 0.0  # the whole trial: build, runtime and the failing entries

    def __post_init__(self) -> None:
        if self.status not in TRIAL_STATUSES:
            raise ValueError(f"a culprit trial is PASS, FAIL or INCONCLUSIVE, not {self.status!r}")


@dataclass(frozen=True)
class Trial:
    subset: tuple[PullRef, ...]
    result: TrialResult


@dataclass
class CulpritSearch:
    """The search's record: every trial, the culprits found and the largest subset known to pass."""

    prs: tuple[PullRef, ...]
    max_builds: int
    trials: list[Trial] = field(default_factory=list)
    culprits: list[tuple[PullRef, str]] = field(default_factory=list)  # (PR, why it is blamed)
    passing: tuple[PullRef, ...] | None = None  # main plus these passed the failing entries
    conclusion: Conclusion = "undetermined"
    why: str = ""

    def to_json(self) -> dict[str, object]:
        return {
            "prs": [str(pr) for pr in self.prs],
            "max_builds": self.max_builds,
            "conclusion": self.conclusion,
            "why": self.why,
            "culprits": [{"pr": str(pr), "why": why} for pr, why in self.culprits],
            "passing": None if self.passing is None else [str(pr) for pr in self.passing],
            "trials": [
                {
                    "subset": [str(pr) for pr in t.subset],
                    "verdict": t.result.status.value,
                    "detail": t.result.detail,
                    "build": t.result.build,
                    "seconds": round(t.result.seconds, 1),
                }
                for t in self.trials
            ],
        }


class _OutOfBuilds(Exception):
    pass


class _Undecided(Exception):
    pass


def find_culprits(
    prs: Sequence[PullRef],
    run_trial: Callable[[tuple[PullRef, ...]], TrialResult],
    *,
    max_builds: int,
    say: Say = quiet,
) -> CulpritSearch:
    """Search the PRs of a night that failed with all of them grafted; `run_trial` builds and tests one subset."""
    search = CulpritSearch(tuple(prs), max_builds)

    def fails(subset: tuple[PullRef, ...]) -> bool:
        if len(search.trials) >= max_builds:
            raise _OutOfBuilds
        label = " + ".join(["main", *map(str, subset)])
        say(f"culprit trial {len(search.trials) + 1}/{max_builds}: {label}")
        result = run_trial(subset)
        search.trials.append(Trial(subset, result))
        say(f"culprit trial {len(search.trials)}: {result.status.value}: {result.detail}")
        if result.status == Status.INCONCLUSIVE:
            raise _Undecided(f"the trial of {label} could not decide: {result.detail}")
        if result.status == Status.PASS:
            search.passing = subset
        return result.status == Status.FAIL

    try:
        if fails(()):
            search.conclusion = "main-fails"
            search.why = "main alone fails the same entries: no grafted PR is to blame"
            return search
        _blame(tuple(prs), fails, search)
        search.conclusion = "culprits"
        search.why = f"{len(search.culprits)} of {len(prs)} PR(s) break the failing entries"
    except _OutOfBuilds:
        search.why = f"the bound of {max_builds} extra builds was reached before every culprit was found"
    except _Undecided as exc:
        search.why = str(exc)
    return search


def _blame(prs: tuple[PullRef, ...], fails: Callable[[tuple[PullRef, ...]], bool], search: CulpritSearch) -> None:
    """Known: main passes, main plus all of `prs` fails. Find culprits one at a time by halving."""
    base: tuple[PullRef, ...] = ()  # passes
    suspects = prs  # base + suspects fails
    while suspects:
        good = base
        narrowed = suspects
        while len(narrowed) > 1:
            half = narrowed[: len(narrowed) // 2]
            if fails(good + half):
                narrowed = half
            else:
                good, narrowed = good + half, narrowed[len(half) :]
        culprit = narrowed[0]
        alone = " + ".join(["main", *map(str, good)])
        search.culprits.append((culprit, f"{alone} passes; adding {culprit} fails"))
        after = suspects[suspects.index(culprit) + 1 :]
        base = good
        if not after or not fails(base + after):
            if after:
                base = base + after
            return
        suspects = after
