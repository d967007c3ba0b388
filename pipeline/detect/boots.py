"""Boot pairs in turn and the boot spread they carry: on a host that holds one server, A and B are booted in turns.

Each boot pair (a boot of A and a boot of B next to it in time, the order alternating A B, B A, ...) gives one
difference of the boots' mean log throughput. The difference carries both boots' own offsets (memory layout,
kernels picked at start-up), so the spread of the differences within a night measures the boot spread itself. One
night's few pairs estimate it roughly, so it is pooled with the hardware's shipped `pairs.boot_sd` (a prior worth
PRIOR_DF pairs) and with this host's earlier nights (infra/pair_book.py): a runner whose boots spread more than its
file says learns it, and a night of pairs that agree by chance cannot claim more certainty than the pool allows.
Once the host's own pairs are enough (OWN_SPREAD_DF) and spread wider than the pool, they are taken alone: a prior
narrower than the runner's boots would otherwise keep the spread too narrow for good, and a spread taken too narrow
FAILs good builds.
The decision is the sequential test's (detect/sequential.py).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from pipeline.config.thresholds import MIN_PRIOR_BOOT_SD, OWN_SPREAD_DF, PRIOR_DF
from pipeline.detect.evidence import SpreadSoFar

# PRIOR_DF is read from here when the spread is pooled, so a comparison (benchmarks/detector_simulation.py
# --prior-df) sets it here
__all__ = ["PRIOR_DF", "BootPair", "PooledSpread", "pooled_spread", "within_boot_variance"]


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


def _run_share(boots: Sequence[BootPair]) -> float:
    """The mean over boot pairs of 1/runs_A + 1/runs_B: how much of one run's variance a difference carries."""
    return statistics.fmean(1.0 / len(p.a) + 1.0 / len(p.b) for p in boots)


@dataclass(frozen=True)
class PooledSpread:
    """The boot spread a decision uses, pooled from the hardware's prior, this host's past pairs and tonight's."""

    spread: float  # SD of log(B/A) between a boot of each, the runs' share taken off
    variance: float  # one boot pair difference's variance (the spread's square plus the runs' share)
    df: float
    source: str


def pooled_spread(prior_boot_sd: float, host: SpreadSoFar, tonight: Sequence[BootPair]) -> PooledSpread:
    """Pool the variance of a boot pair difference: the prior (the file's `pairs.boot_sd`, at least
    MIN_PRIOR_BOOT_SD, plus tonight's runs' share) worth PRIOR_DF pairs, this host's past nights' squared deviations
    and tonight's own. The prior only seeds it: a runner's own pairs outweigh it as they accumulate, and replace it
    once they carry OWN_SPREAD_DF degrees of freedom and spread wider than the pool."""
    for pair in tonight:
        both = pair.a + pair.b
        if not pair.a or not pair.b or min(both) <= 0 or not all(map(math.isfinite, both)):
            raise ValueError(f"boot pairs need positive, finite runs on both sides, got {pair}")
    within, _ = within_boot_variance(tonight) if tonight else (0.0, 0)
    runs = _run_share(tonight) if tonight else 0.0
    prior_sd = max(prior_boot_sd, MIN_PRIOR_BOOT_SD)
    differences = [pair.difference() for pair in tonight]
    tonight_squares = 0.0
    if len(differences) > 1:
        centre = statistics.fmean(differences)
        tonight_squares = math.fsum((d - centre) ** 2 for d in differences)
    tonight_df = max(0, len(differences) - 1)
    df = PRIOR_DF + host.df + tonight_df
    variance = (PRIOR_DF * (prior_sd**2 + within * runs) + host.squares + tonight_squares) / df
    source = f"the file's {prior_sd:.1%} worth {PRIOR_DF:g} pairs"
    if host.df:
        source += f", this host's {host.df} from {host.nights} night{'s' if host.nights != 1 else ''}"
    if tonight_df:
        source += f", tonight's {tonight_df}"
    own_df = host.df + tonight_df
    if own_df >= OWN_SPREAD_DF and (host.squares + tonight_squares) / own_df > variance:
        variance, df = (host.squares + tonight_squares) / own_df, own_df
        source += ", this host's own taken alone: wider than the pool"
    spread = math.sqrt(max(0.0, variance - within * runs))
    return PooledSpread(spread, variance, df, source)
