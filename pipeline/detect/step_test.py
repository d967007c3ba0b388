"""A bisection step's perf question, asked as two hypotheses: is this commit like tonight's A or like tonight's B?

By the time main is bisected tonight's boot pairs have measured both ends on this host within the hour: the last
confirmed build (A) and tonight's build (B), whose pairs FAILed the cell at B/A = exp(-slowdown). A step need not
ask "is it slower than A by the smallest slowdown we block?" from scratch (several boot pairs, two boots each): it
asks which of the two it is like, and one boot of it answers whenever the gap is several boot SDs.

Each of the step's boots gives x, the mean log of its runs; its boots' mean against the mean of tonight's n boots of
A is d. Under "like A" d ~ N(0, v), under "like B" d ~ N(-slowdown, v), v = w (1/k + 1/n) for k boots of the step
and one boot's variance w (the host's boot spread, or tonight's boots of A where they spread wider). The log-
likelihood ratio of B against A

    llr = (slowdown / v) x (-d - slowdown / 2)

decides B (bad) at +STEP_BOUND and A (good) at -STEP_BOUND. Between the two the step buys another boot, up to the
setting `culprit.step_boots`; still between after that, the step is neither (a commit that made the cell slower by
part of tonight's slowdown, or boots that spread more than the host's record), and the bisection skips it rather than
guess. The bound is symmetric because both wrong answers cost the same: either sends the search into the wrong half.
benchmarks/step_simulation.py measures the boots and the wrong-step rate of this rule on tonight's own pairs
(docs/verdict.md, "One boot a bisection step").
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

# A step's error rate for Wald's bounds. The bounds hold it far below this (a boot's evidence overshoots them): in
# benchmarks/step_simulation.py at STEP_ERROR 0.05 the wrong steps were at most 1 % in every row and 0-0.2 % from a
# gap of 4 boot SDs, where one boot decided 83-100 % of the steps; at 0.01 one boot decided 67 % at 4.1 SDs.
STEP_ERROR = 0.05
STEP_BOUND = math.log((1 - STEP_ERROR) / STEP_ERROR)

StepAnswer = Literal["A", "B", "more", "between"]


@dataclass(frozen=True)
class TwoBuilds:
    """Tonight's two hypotheses for one cell: the log figure of each of tonight's boots of A, the log slowdown its
    pairs FAILed B at, and one boot's log variance on this host."""

    a_boots: tuple[float, ...]
    slowdown: float
    boot_variance: float

    def __post_init__(self) -> None:
        if not self.a_boots or self.slowdown <= 0 or self.boot_variance <= 0:
            raise ValueError(f"two builds need boots of A, a slowdown and a variance, got {self}")

    @property
    def a_mean(self) -> float:
        return statistics.fmean(self.a_boots)

    def variance(self, boots: int) -> float:
        """The variance of `boots` boots' mean against the mean of tonight's boots of A."""
        return self.boot_variance * (1.0 / boots + 1.0 / len(self.a_boots))

    def weigh(self, step_boots: Sequence[float]) -> float:
        """The log-likelihood ratio of "like B" against "like A" over the step's boots (each its runs' mean log)."""
        difference = statistics.fmean(step_boots) - self.a_mean
        variance = self.variance(len(step_boots))
        return (self.slowdown / variance) * (-difference - self.slowdown / 2.0)

    def answer(self, step_boots: Sequence[float], *, max_boots: int, least_boots: int = 1) -> StepAnswer:
        """B or A where the evidence reaches a bound; else another boot while fewer than `max_boots` were made,
        and "between" once they were. Fewer than `least_boots` boots are never an answer (a bisection's boundary
        step tried again, bisect.CONFIRM_BOOTS): another boot, where `max_boots` allows one."""
        if len(step_boots) < min(least_boots, max_boots):
            return "more"
        weight = self.weigh(step_boots)
        if weight >= STEP_BOUND:
            return "B"
        if weight <= -STEP_BOUND:
            return "A"
        return "more" if len(step_boots) < max_boots else "between"


def two_builds(a_boots: Sequence[Sequence[float]], b_over_a: float, pair_variance: float) -> TwoBuilds:
    """Tonight's hypotheses from its boots of A (each boot's runs), the B/A its pairs FAILed the cell at, and the
    variance of one boot pair's difference on this host (pooled: the file's prior and the host's pairs). One boot's
    variance is half a pair's, or the spread of tonight's boots of A where that is wider: a step is never held to a
    spread narrower than the boots it is compared with."""
    logs = tuple(boot_log(runs) for runs in a_boots)
    variance = pair_variance / 2.0
    if len(logs) > 1:
        variance = max(variance, statistics.variance(logs))
    return TwoBuilds(logs, -math.log(b_over_a), variance)


def boot_log(runs: Sequence[float]) -> float:
    """One boot's figure: the mean log of its runs (as a boot pair's difference reads each side)."""
    return statistics.fmean(math.log(x) for x in runs)
