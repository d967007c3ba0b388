"""Paired confirmation from boots in turn: on a host that holds one server, A and B are booted one after the other.

Each boot pair (a boot of A and a boot of B next to it in time, the order alternating A B, B A, ...) gives one
difference of the boots' mean log throughput. The difference carries both boots' own offsets (memory layout,
kernels picked at start-up), so the spread of the differences over the night's boot pairs measures the boot
spread itself: no guessed value has to be added, as it must be when A and B are one boot each. With few boot
pairs that estimate is rough, so it is pooled with a prior (the hardware's shipped `pairs.boot_sd`, worth
PRIOR_DF degrees of freedom): a night of three boot pairs that happen to agree cannot claim more certainty than
the hardware is known to allow, and a night of eight speaks mostly for itself. The decision is confirm's.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from pipeline.config.thresholds import (  # the boot pairs' schedule and prior, set with the hardware's pair rules
    CI_LEVEL,
    MIN_EFFECT,
    MIN_PRIOR_BOOT_SD,
    PRIOR_DF,
)
from pipeline.detect.steps import FAIL_ALPHA, Confirmation, decide


@dataclass(frozen=True)
class BootPair:
    """One boot of A and one of B, measured next to each other: the metric of every run in each."""

    a: tuple[float, ...]
    b: tuple[float, ...]

    def difference(self) -> float:
        """B's mean log throughput minus A's: the boot pair's log ratio."""
        return statistics.fmean(math.log(x) for x in self.b) - statistics.fmean(math.log(x) for x in self.a)


def within_boot_variance(boots: Sequence[BootPair]) -> tuple[float, int]:
    """The pooled variance of one run's log around its boot's mean, and its degrees of freedom."""
    squares, df = 0.0, 0
    for pair in boots:
        for runs in (pair.a, pair.b):
            logs = [math.log(x) for x in runs]
            centre = statistics.fmean(logs)
            squares += math.fsum((x - centre) ** 2 for x in logs)
            df += len(logs) - 1
    return (squares / df if df else 0.0), df


def boot_spread(boots: Sequence[BootPair]) -> float:
    """The night's own estimate of the boot spread, in `pairs.boot_sd`'s unit (the SD of log(B/A) between a boot of
    each): the boot pairs' spread, less what their runs explain."""
    if len(boots) < 2:
        return math.nan
    differences = [pair.difference() for pair in boots]
    within, _ = within_boot_variance(boots)
    runs = _run_share(boots)
    return math.sqrt(max(0.0, statistics.variance(differences) - within * runs))


def _run_share(boots: Sequence[BootPair]) -> float:
    """The mean over boot pairs of 1/runs_A + 1/runs_B: how much of one run's variance a difference carries."""
    return statistics.fmean(1.0 / len(p.a) + 1.0 / len(p.b) for p in boots)


def confirm_boots(
    boots: Sequence[BootPair],
    *,
    min_effect: float = MIN_EFFECT,
    prior_boot_sd: float = 0.0,
    prior_df: float | None = None,
    fail_alpha: float = FAIL_ALPHA,
    ci_level: float = CI_LEVEL,
) -> Confirmation:
    """Decide on boot pairs: the mean difference, its error from the differences' spread pooled with the prior's.

    The prior's variance of a difference is the hardware's boot spread (`pairs.boot_sd`, the SD of log(B/A) between
    a boot of each, at least MIN_PRIOR_BOOT_SD) plus the runs' share measured tonight; pooled with the night's
    sample variance of the differences, weighted by degrees of freedom (prior_df and n - 1), the t test has
    prior_df + n - 1 of them.
    """
    for pair in boots:
        if not pair.a or not pair.b or min(pair.a + pair.b) <= 0 or not all(map(math.isfinite, pair.a + pair.b)):
            raise ValueError(f"boot pairs need positive, finite runs on both sides, got {pair}")
    prior_df = PRIOR_DF if prior_df is None else prior_df
    n = len(boots)
    if n == 0:
        return Confirmation(
            "INCONCLUSIVE", "no boot pair measured", 0, math.nan, math.nan, math.nan, math.nan, math.nan, ci_level,
            math.nan, fail_alpha, math.nan, math.nan, min_effect,
        )  # fmt: skip
    differences = [pair.difference() for pair in boots]
    mean = statistics.fmean(differences)
    within, _ = within_boot_variance(boots)
    prior_sd = max(prior_boot_sd, MIN_PRIOR_BOOT_SD)
    prior_variance = prior_sd**2 + within * _run_share(boots)
    sample_variance = statistics.variance(differences) if n > 1 else 0.0
    df = prior_df + n - 1
    variance = (prior_df * prior_variance + (n - 1) * sample_variance) / df
    spread = boot_spread(boots)
    runs = sorted({len(p.a) for p in boots} | {len(p.b) for p in boots})
    unit = f"{n} boot pairs ({'/'.join(map(str, runs))} runs a boot)"
    night = f"tonight's boot pairs {spread:.1%}" if math.isfinite(spread) else "one boot pair, no spread of its own"
    note = f" (boot-to-boot SD of B/A: {night}, pooled with the hardware's {prior_sd:.1%} worth {prior_df:g} pairs)"
    return decide(
        mean, math.sqrt(variance / n), df, n=n, unit=unit, sd=math.sqrt(sample_variance), min_effect=min_effect,
        fail_alpha=fail_alpha, ci_level=ci_level, boot_sd=spread if math.isfinite(spread) else prior_sd, note=note,
    )  # fmt: skip
